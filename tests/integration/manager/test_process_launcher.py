"""The process launcher with real child processes (a trivial sleeping child: no Redis needed)."""

import os
import signal
import socket
import sys
from pathlib import Path

import psutil
from sluice.worker_standby import STANDBY_FLAG
from sluice_manager.supervision.launchers.legacy_base import ProcessState, WorkerSpec
from sluice_manager.supervision.launchers.legacy_process import ProcessLauncher

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


# A standby as the real worker's: wait for the assignment, then run as the sleeper would.
STANDBY = (
    "import sys, time; from sluice.worker_standby import await_assignment; args = await_assignment(); "
    "print('assigned', args, flush=True); time.sleep(60)"
)
STANDBY_COMMAND = [sys.executable, "-c", STANDBY, STANDBY_FLAG]
# A standby that cannot even start.
BROKEN_STANDBY_COMMAND = [sys.executable, "-c", "raise SystemExit(1)", STANDBY_FLAG]


def launcher(
    tmp_path: Path, exits: Exits, host: str | None = None, standby: list[str] | None = None
) -> ProcessLauncher:
    return ProcessLauncher(
        command=sleeper_command,
        env=dict(os.environ),
        logs_dir=tmp_path / "logs",
        host=host or socket.gethostname(),
        on_exit=exits,
        poll_interval_s=0.05,
        standby_command=standby,
        standby_delay_s=0.05,
    )


def standby_pid(runner: ProcessLauncher) -> int | None:
    standby = runner._standby
    return None if standby is None else standby.pid


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
        pid = record.pid
        assert pid is not None
        await eventually(lambda: not psutil.pid_exists(pid) or _zombie(pid), timeout_s=5)
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


async def test_a_worker_starts_as_the_standby_and_a_new_standby_follows(tmp_path: Path) -> None:
    exits = Exits()
    runner = launcher(tmp_path, exits, standby=STANDBY_COMMAND)
    try:
        await runner.prepare()
        first_standby = standby_pid(runner)
        assert first_standby is not None
        record = await runner.start(WorkerSpec("m", "1.0", "9010", torch_threads=3))
        assert (record.pid, record.marker, record.command_marker) == (
            first_standby,
            STANDBY_FLAG,
            STANDBY_FLAG,
        )
        log_file = Path(record.log_path)
        await eventually(lambda: "'--worker-id', '9010'" in log_file.read_text(), timeout_s=10)
        await eventually(lambda: "--torch-threads', '3'" in log_file.read_text(), timeout_s=1)
        await eventually(lambda: standby_pid(runner) not in (None, first_standby), timeout_s=5)
        # Its own process group, as any worker: a stop signal reaches it.
        assert os.getpgid(first_standby) == first_standby
        await runner.stop("9010", graceful=True)
        await eventually(lambda: "9010" in exits.seen, timeout_s=5)
        assert exits.seen["9010"] == -signal.SIGTERM
        second_standby = standby_pid(runner)
    finally:
        await runner.aclose()
    assert second_standby is not None
    assert not psutil.pid_exists(second_standby) or _zombie(second_standby)  # closing ends the standby


async def test_a_standby_worker_is_adopted_by_its_command_line_marker(tmp_path: Path) -> None:
    first = launcher(tmp_path, Exits(), standby=STANDBY_COMMAND)
    await first.prepare()
    record = await first.start(WorkerSpec("m", "1.0", "9011"))
    await first.aclose()  # the manager died; the worker keeps running (its next standby does not)
    second = launcher(tmp_path, Exits())
    try:
        assert record.marker == STANDBY_FLAG
        assert second.adopt(record)
        assert second.list() == {"9011": ProcessState.RUNNING}
        await second.stop("9011", graceful=False)
    finally:
        await second.aclose()
        _reap_if_ours(first)


async def test_a_standby_that_cannot_start_turns_standbys_off(tmp_path: Path) -> None:
    exits = Exits()
    runner = launcher(tmp_path, exits, standby=BROKEN_STANDBY_COMMAND)
    try:
        await runner.prepare()
        broken = runner._standby
        assert broken is not None
        await eventually(lambda: broken.poll() is not None, timeout_s=10)
        record = await runner.start(WorkerSpec("m", "1.0", "9012"))
        assert record.marker == ""
        assert record.pid != broken.pid
        await eventually(lambda: "child up" in Path(record.log_path).read_text(), timeout_s=10)
        await runner.prepare()
        assert runner._standby is None  # off for good: no restart loop
    finally:
        await runner.aclose()


async def test_a_standby_that_cannot_be_spawned_turns_standbys_off(tmp_path: Path) -> None:
    runner = launcher(tmp_path, Exits(), standby=[str(tmp_path / "no-such-python"), STANDBY_FLAG])
    try:
        await runner.prepare()  # logs a warning instead of failing the manager's startup
        assert runner._standby is None
        record = await runner.start(WorkerSpec("m", "1.0", "9013"))
        assert record.marker == ""
    finally:
        await runner.aclose()
