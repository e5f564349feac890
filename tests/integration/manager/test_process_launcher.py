"""The process launcher with real child processes: the launcher contract (tests/support/
launcher_contract.py), then what only local processes do (process groups, pids that were reused,
the standby worker)."""

import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psutil
import pytest
from sluice.lifecycle.worker_standby import STANDBY_FLAG
from sluice_manager.supervision.launchers.base import LOG_PATH, Launcher, RunState, WorkerSpec
from sluice_manager.supervision.launchers.process import MARKER, START_TIME, ProcessLauncher
from sluice_manager.supervision.launchers.standby import Standby

from tests.support.eventually import eventually
from tests.support.launcher_contract import (
    CONTRACT,
    CONTRACT_IDS,
    FAKE_WORKER_PROGRAM,
    ExitWatch,
    LauncherUnderTest,
    spec,
)

HOST = socket.gethostname()


def fake_worker_command(spec: WorkerSpec) -> list[str]:
    # The worker id on the command line lets adoption recognise the process.
    return [sys.executable, "-c", FAKE_WORKER_PROGRAM, *spec.arguments()]


# A standby as the real worker's: wait for the assignment, then run as the fake worker would.
STANDBY = (
    "import sys; from sluice.lifecycle.worker_standby import await_assignment; args = await_assignment(); "
    "sys.argv = ['-c', *args]; exec(compile(" + repr(FAKE_WORKER_PROGRAM) + ", 'fake', 'exec'))"
)
STANDBY_COMMAND = [sys.executable, "-c", STANDBY, STANDBY_FLAG]
# A standby that cannot even start.
BROKEN_STANDBY_COMMAND = [sys.executable, "-c", "raise SystemExit(1)", STANDBY_FLAG]


def launcher(tmp_path: Path, host: str = HOST, standby: list[str] | None = None) -> ProcessLauncher:
    env = dict(os.environ)
    return ProcessLauncher(
        command=fake_worker_command,
        env=env,
        logs_dir=tmp_path / "logs",
        host=host,
        poll_interval_s=0.05,
        standby=None
        if standby is None
        else Standby(standby, env, tmp_path / "logs" / "workers" / "standby.log", delay_s=0.05),
    )


@pytest.fixture
async def launcher_under_test(tmp_path: Path) -> AsyncIterator[LauncherUnderTest]:
    async def make() -> Launcher:
        return launcher(tmp_path)

    # A stop may reach the program before it handles SIGTERM (-15); an adopted process is not our
    # child, so its exit code is not known.
    under = LauncherUnderTest(
        make, HOST, stopped_codes=frozenset({0, -15}), killed_codes=frozenset({-9, None})
    )
    yield under
    await under.close_all()


@pytest.mark.parametrize("check", CONTRACT, ids=CONTRACT_IDS)
async def test_contract(
    check: Callable[[LauncherUnderTest], Awaitable[None]], launcher_under_test: LauncherUnderTest
) -> None:
    await check(launcher_under_test)


async def test_a_worker_leads_its_own_process_group_and_logs_to_its_file(tmp_path: Path) -> None:
    runner = launcher(tmp_path)
    try:
        record = await runner.start(spec(HOST, "9000", threads=2))
        pid = int(record.handle)
        # Its own process group, so a terminal's Ctrl-C does not reach it.
        assert os.getpgid(pid) == pid
        assert record.details[START_TIME]
        assert record.details[MARKER] == ""
        log_file = Path(record.details[LOG_PATH])
        await eventually(lambda: "'--torch-threads', '2'" in log_file.read_text(), timeout_s=10)
        await runner.stop("9000", graceful=False)
    finally:
        await runner.aclose()


async def test_a_record_naming_another_host_or_a_reused_pid_is_not_adopted(tmp_path: Path) -> None:
    first = launcher(tmp_path)
    record = await first.start(spec(HOST, "9003"))
    await first.aclose()
    second = launcher(tmp_path)
    try:
        assert not await launcher(tmp_path, host="elsewhere").adopt([record])
        started = float(record.details[START_TIME])
        stale = record.model_copy(update={"details": {**record.details, START_TIME: str(started - 100)}})
        assert not await second.adopt([stale])
        assert [r.worker_id for r in await second.adopt([record])] == ["9003"]
        await second.stop("9003", graceful=False)
    finally:
        await second.aclose()
        _reap_if_ours(first)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _reap_if_ours(runner: ProcessLauncher) -> None:
    for child in runner._children.values():
        if child.popen is not None:
            child.popen.poll()


def standby_pid(runner: ProcessLauncher) -> int | None:
    standby = runner._standby
    process = None if standby is None else standby._process
    return None if process is None else process.pid


async def test_a_worker_starts_as_the_standby_and_a_new_standby_follows(tmp_path: Path) -> None:
    runner = launcher(tmp_path, standby=STANDBY_COMMAND)
    watch = ExitWatch(runner)
    try:
        await runner.prepare()
        first_standby = standby_pid(runner)
        assert first_standby is not None
        record = await runner.start(spec(HOST, "9010", threads=3))
        assert (int(record.handle), record.details[MARKER]) == (first_standby, STANDBY_FLAG)
        log_file = Path(record.details[LOG_PATH])
        await eventually(lambda: "'--worker-id', '9010'" in log_file.read_text(), timeout_s=10)
        await eventually(lambda: "'--torch-threads', '3'" in log_file.read_text(), timeout_s=1)
        await eventually(lambda: standby_pid(runner) not in (None, first_standby), timeout_s=5)
        # Its own process group, as any worker: a stop signal reaches it.
        assert os.getpgid(first_standby) == first_standby
        await runner.stop("9010", graceful=True)
        assert (await watch.wait_for("9010")).exit_code == 0
        second_standby = standby_pid(runner)
    finally:
        watch.close()
        await runner.aclose()
    assert second_standby is not None
    assert not psutil.pid_exists(second_standby) or _zombie(second_standby)  # closing ends the standby


async def test_a_standby_worker_is_adopted_by_its_command_line_marker(tmp_path: Path) -> None:
    first = launcher(tmp_path, standby=STANDBY_COMMAND)
    await first.prepare()
    record = await first.start(spec(HOST, "9011"))
    await first.aclose()  # the manager died; the worker keeps running (its next standby does not)
    second = launcher(tmp_path)
    try:
        assert record.details[MARKER] == STANDBY_FLAG
        assert await second.adopt([record])
        assert await second.states() == {"9011": RunState.RUNNING}
        await second.stop("9011", graceful=False)
    finally:
        await second.aclose()
        _reap_if_ours(first)


async def test_a_standby_that_cannot_start_turns_standbys_off(tmp_path: Path) -> None:
    runner = launcher(tmp_path, standby=BROKEN_STANDBY_COMMAND)
    try:
        await runner.prepare()
        assert runner._standby is not None
        broken = runner._standby._process
        assert broken is not None
        await eventually(lambda: broken.poll() is not None, timeout_s=10)
        record = await runner.start(spec(HOST, "9012"))
        assert record.details[MARKER] == ""
        assert int(record.handle) != broken.pid
        await eventually(lambda: "fake worker up" in Path(record.details[LOG_PATH]).read_text(), timeout_s=10)
        await runner.prepare()
        assert runner._standby._process is None  # off for good: no restart loop
        await runner.stop("9012", graceful=False)
    finally:
        await runner.aclose()


async def test_a_standby_that_cannot_be_spawned_turns_standbys_off(tmp_path: Path) -> None:
    runner = launcher(tmp_path, standby=[str(tmp_path / "no-such-python"), STANDBY_FLAG])
    try:
        await runner.prepare()  # logs a warning instead of failing the manager's startup
        assert runner._standby is not None
        assert runner._standby._process is None
        record = await runner.start(spec(HOST, "9013"))
        assert record.details[MARKER] == ""
        await runner.stop("9013", graceful=False)
    finally:
        await runner.aclose()
