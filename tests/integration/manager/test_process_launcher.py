"""The process launcher with real child processes (a trivial sleeping child: no Redis needed)."""

import os
import signal
import socket
import sys
from pathlib import Path

import psutil
from sluice_manager.launcher import ProcessState, WorkerSpec
from sluice_manager.process_launcher import ProcessLauncher

from tests.support.eventually import eventually

SLEEPER = "import sys, time; print('child up', sys.argv[1:], flush=True); time.sleep(60)"


def sleeper_command(spec: WorkerSpec) -> list[str]:
    # The worker id on the command line lets adoption recognise the process.
    return [
        sys.executable,
        "-c",
        SLEEPER,
        "--worker-id",
        spec.worker_id,
        "--torch-threads",
        str(spec.torch_threads),
    ]


class Exits:
    def __init__(self) -> None:
        self.seen: dict[str, int | None] = {}

    async def __call__(self, worker_id: str, code: int | None) -> None:
        self.seen[worker_id] = code


def launcher(tmp_path: Path, exits: Exits, host: str | None = None) -> ProcessLauncher:
    return ProcessLauncher(
        command=sleeper_command,
        env=dict(os.environ),
        logs_dir=tmp_path / "logs",
        host=host or socket.gethostname(),
        on_exit=exits,
        poll_interval_s=0.05,
    )


async def test_start_stop_and_exit_report(tmp_path: Path) -> None:
    exits = Exits()
    runner = launcher(tmp_path, exits)
    record = await runner.start(WorkerSpec("m", "1.0", "9000", torch_threads=2))
    try:
        assert record.pid is not None
        assert record.process_start_time is not None
        assert (record.model_name, record.version, record.launcher) == ("m", "1.0", "process")
        assert runner.list() == {"9000": ProcessState.RUNNING}
        # Its own process group, so a terminal's Ctrl-C does not reach it.
        assert os.getpgid(record.pid) == record.pid
        log_file = Path(record.log_path)
        await eventually(lambda: "--torch-threads', '2'" in log_file.read_text(), timeout_s=10)
        await runner.stop("9000", graceful=True)
        await eventually(lambda: "9000" in exits.seen, timeout_s=5)
        assert exits.seen["9000"] == -signal.SIGTERM
        assert runner.list() == {"9000": ProcessState.EXITED}
        runner.forget("9000")
        assert runner.list() == {}
    finally:
        await runner.aclose()


async def test_kill(tmp_path: Path) -> None:
    exits = Exits()
    runner = launcher(tmp_path, exits)
    await runner.start(WorkerSpec("m", "1.0", "9001"))
    try:
        await runner.stop("9001", graceful=False)
        await eventually(lambda: "9001" in exits.seen, timeout_s=5)
        assert exits.seen["9001"] == -signal.SIGKILL
    finally:
        await runner.aclose()


async def test_unexpected_exit_is_reported_at_once(tmp_path: Path) -> None:
    exits = Exits()
    runner = launcher(tmp_path, exits)
    record = await runner.start(WorkerSpec("m", "1.0", "9002"))
    try:
        assert record.pid is not None
        os.kill(record.pid, signal.SIGKILL)
        await eventually(lambda: "9002" in exits.seen, timeout_s=1)
    finally:
        await runner.aclose()


async def test_a_new_launcher_adopts_a_running_worker(tmp_path: Path) -> None:
    first_exits, second_exits = Exits(), Exits()
    first = launcher(tmp_path, first_exits)
    record = await first.start(WorkerSpec("m", "1.0", "9003"))
    await first.aclose()  # the manager died; the worker keeps running
    second = launcher(tmp_path, second_exits)
    try:
        assert not launcher(tmp_path, Exits(), host="elsewhere").adopt(record)
        stale = record.model_copy(update={"process_start_time": (record.process_start_time or 0) - 100})
        assert not second.adopt(stale)
        assert not second.adopt(record.model_copy(update={"worker_id": "9999"}))
        assert second.adopt(record)
        assert not second.adopt(record)  # once
        assert second.list() == {"9003": ProcessState.RUNNING}
        await second.stop("9003", graceful=True)
        await eventually(lambda: "9003" in second_exits.seen, timeout_s=5)
        assert second_exits.seen["9003"] is None  # not our child: no exit code
        assert record.pid is not None
        await eventually(lambda: not psutil.pid_exists(record.pid) or _zombie(record.pid), timeout_s=5)
    finally:
        await second.aclose()
        _reap_if_ours(first)


async def test_adopting_a_dead_worker_fails(tmp_path: Path) -> None:
    exits = Exits()
    first = launcher(tmp_path, exits)
    record = await first.start(WorkerSpec("m", "1.0", "9004"))
    await first.stop("9004", graceful=False)
    await eventually(lambda: "9004" in exits.seen, timeout_s=5)
    await first.aclose()
    assert not launcher(tmp_path, Exits()).adopt(record)


async def test_stop_of_an_unknown_worker_is_harmless(tmp_path: Path) -> None:
    runner = launcher(tmp_path, Exits())
    await runner.stop("nope", graceful=True)
    await runner.aclose()


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _reap_if_ours(runner: ProcessLauncher) -> None:
    for child in runner._children.values():
        if child.popen is not None:
            child.popen.poll()
