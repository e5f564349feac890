"""wait_any: stop-or-wake-or-timeout without leaving a stray cancellation on the caller."""

import asyncio
import contextlib
import time

from sluice_manager.waiting import finish, wait_any


async def test_returns_when_an_event_is_set() -> None:
    first, second = asyncio.Event(), asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, second.set)
    started = time.monotonic()
    await wait_any(first, second, timeout_s=5)
    assert time.monotonic() - started < 1


async def test_returns_after_the_timeout() -> None:
    started = time.monotonic()
    await wait_any(asyncio.Event(), timeout_s=0.05)
    assert 0.04 <= time.monotonic() - started < 1


async def test_the_caller_is_never_cancelled() -> None:
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for _ in range(200):
        event.clear()
        # Set the event just as the timeout fires.
        loop.call_later(0.001, event.set)
        await wait_any(event, timeout_s=0.001)
        await asyncio.sleep(0)  # a stray cancellation would raise here
    assert asyncio.current_task() is not None
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_finish_lets_a_task_end() -> None:
    stop = asyncio.Event()

    async def loop() -> None:
        await stop.wait()

    task = asyncio.create_task(loop())
    stop.set()
    assert await finish(task, timeout_s=1)
    assert task.done()
    assert not task.cancelled()


async def test_finish_never_hangs_on_a_task_that_swallows_cancellation() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        # What redis-py 8.1's asyncio pipelines sometimes do with a cancellation.
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    task = asyncio.create_task(stubborn())
    started = time.monotonic()
    assert not await finish(task, timeout_s=0.1)
    assert time.monotonic() - started < 3
    assert not await finish(task, timeout_s=0.1, cancel_first=True)
    release.set()
    await task
