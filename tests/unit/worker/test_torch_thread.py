"""The torch thread: one thread, results and exceptions back on the loop, sys.exit() contained."""

import asyncio
import sys
import threading
import time

import pytest
import structlog
from sluice_worker.torch_thread import HandlerExit, TorchThread


async def test_calls_run_on_one_named_daemon_thread() -> None:
    worker = TorchThread(name="torch-test")
    try:
        names = {await worker.run(lambda: threading.current_thread().name) for _ in range(3)}
        assert names == {"torch-test"}
        assert await worker.run(lambda: threading.current_thread().daemon)
        assert await worker.run(pow, 2, 10) == 1024
    finally:
        worker.close()


async def test_exceptions_come_back_and_the_thread_survives() -> None:
    worker = TorchThread()
    try:
        with pytest.raises(ZeroDivisionError):
            await worker.run(lambda: 1 / 0)
        with pytest.raises(HandlerExit) as caught:
            await worker.run(sys.exit, 7)
        assert isinstance(caught.value.cause, SystemExit)
        assert await worker.run(lambda: "still alive") == "still alive"
    finally:
        worker.close()


async def test_busy_while_a_call_runs() -> None:
    worker = TorchThread()
    release = threading.Event()
    try:
        assert not worker.busy
        started = threading.Event()

        def block() -> bool:
            started.set()
            return release.wait(5)

        task = asyncio.ensure_future(worker.run(block))
        assert await asyncio.to_thread(started.wait, 5)
        assert worker.busy
        release.set()
        assert await task is True
        assert not worker.busy
    finally:
        worker.close()


async def test_busy_seconds_count_finished_calls_and_the_running_one() -> None:
    worker = TorchThread()
    release = threading.Event()
    started = threading.Event()

    def block() -> bool:
        started.set()
        return release.wait(5)

    try:
        assert worker.busy_s() == 0.0
        await worker.run(time.sleep, 0.05)
        after_one = worker.busy_s()
        assert 0.05 <= after_one < 1.0
        task = asyncio.ensure_future(worker.run(block))
        assert await asyncio.to_thread(started.wait, 5)
        await asyncio.sleep(0.05)
        assert worker.busy_s() >= after_one + 0.05, "the running call counts before it ends"
        release.set()
        await task
        settled = worker.busy_s()
        await asyncio.sleep(0.05)
        assert worker.busy_s() == settled, "idle time is not busy time"
    finally:
        release.set()
        worker.close()


def _sleep_then_divide_by_zero() -> float:
    time.sleep(0.05)
    return 1 / 0


async def test_the_time_a_call_ran_is_known_when_its_caller_resumes() -> None:
    worker = TorchThread()
    try:
        await worker.run(time.sleep, 0.05)
        assert 0.05 <= worker.last_call_s < 5
        await worker.run(lambda: None)
        assert worker.last_call_s < 0.05
        with pytest.raises(ZeroDivisionError):
            await worker.run(_sleep_then_divide_by_zero)
        assert 0.05 <= worker.last_call_s < 5
    finally:
        worker.close()


async def test_log_context_follows_the_call() -> None:
    worker = TorchThread()
    try:
        with structlog.contextvars.bound_contextvars(request_id="r-1"):
            seen = await worker.run(structlog.contextvars.get_contextvars)
        assert seen["request_id"] == "r-1"
    finally:
        worker.close()
