"""The inline runner: calls on the caller's thread, timed like the torch thread's, a handler's
``sys.exit()`` turned into HandlerExit; and which versions get it."""

import sys
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from sluice.registry.records import VersionRecord
from sluice_worker.broker.call_guard import CallGuard
from sluice_worker.inline_runner import InlineRunner
from sluice_worker.modes import runner_for
from sluice_worker.settings import WorkerSettings
from sluice_worker.torch_thread import HandlerExit, TorchThread


@pytest.fixture
def runner() -> Iterator[InlineRunner]:
    # The guard's client connects on first use: these calls never reach Redis.
    guard = CallGuard(redis.Redis.from_url("redis://127.0.0.1:1"), beat_every_s=60.0)
    inline = InlineRunner(guard)
    try:
        yield inline
    finally:
        inline.close()


async def test_a_call_runs_on_the_callers_thread(runner: InlineRunner) -> None:
    assert await runner.run(threading.current_thread) is threading.current_thread()


async def test_calls_are_timed(runner: InlineRunner) -> None:
    seen_busy: list[bool] = []

    def work() -> str:
        seen_busy.append(runner.busy)
        time.sleep(0.05)
        return "done"

    assert await runner.run(work) == "done"
    assert seen_busy == [True]
    assert not runner.busy
    assert runner.last_call_s >= 0.05
    assert runner.busy_s() >= 0.05


async def test_sys_exit_in_a_call_is_a_handler_exit(runner: InlineRunner) -> None:
    with pytest.raises(HandlerExit) as caught:
        await runner.run(sys.exit, 3)
    assert isinstance(caught.value.cause, SystemExit)
    assert not runner.busy


async def test_an_exception_passes_through(runner: InlineRunner) -> None:
    with pytest.raises(ValueError, match="bad input"):
        await runner.run(int, "bad input")


@pytest.mark.parametrize(
    ("setting", "batch_size", "mode", "inline"),
    [
        (True, 1, "", True),
        (True, 8, "", True),
        (False, 1, "", False),
        (True, 1, "continuous_batching", False),
        (True, 1, "async_communication", False),
    ],
)
def test_where_the_handler_runs(setting: bool, batch_size: int, mode: str, inline: bool) -> None:
    record = VersionRecord(
        model_name="m", version="1.0", model_url="m.mar", model_dir="/m", handler="h.py",
        batch_size=batch_size, continuous_batching=mode == "continuous_batching",
        async_communication=mode == "async_communication",
    )  # fmt: skip
    settings = WorkerSettings(
        model_name="m", model_version="1.0", redis_url="redis://127.0.0.1:1", inline_handler=setting
    )
    torch_thread = TorchThread()
    runner = runner_for(settings, record, torch_thread)
    try:
        assert isinstance(runner, InlineRunner) is inline
        assert (runner is torch_thread) is not inline
    finally:
        runner.close()
        torch_thread.close()
