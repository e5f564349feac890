"""`sluice start`'s supervision loop with real processes (small Python programs standing in for the
services): a killed service is restarted and the pid file says so, a crash loop is given up (recorded
in the background, fatal in the foreground), logs are rotated while their writers go on, and a stop
leaves nothing running."""

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from sluice_cli.outcome import GaveUp
from sluice_cli.plan import ServiceSpec, SupervisorPlan
from sluice_cli.restart_policy import RestartPolicy
from sluice_cli.runtime import PidFile, RuntimeDir, this_process
from sluice_cli.status import describe
from sluice_cli.supervisor import Supervisor

MARKER = "sluice-supervisor-test-service"
# Runs until killed; with a "fail-after-first" file named, only its first run does (later ones
# exit 3 at once, as a service whose port was taken would).
SERVICE = """
import os, sys, time
if len(sys.argv) > 2:
    first = sys.argv[2]
    if os.path.exists(first):
        print("cannot start", flush=True)
        sys.exit(3)
    open(first, "w").close()
print("started", os.getpid(), flush=True)
time.sleep(600)
"""
# Writes numbered 1 KiB lines to stdout (its log) every 5 ms.
CHATTY = """
import sys, time
for n in range(100000):
    sys.stdout.write(f"{n:08d} " + "x" * 1014 + "\\n")
    sys.stdout.flush()
    time.sleep(0.005)
"""
FAST = RestartPolicy(backoff_s=(0.0, 0.1, 0.2), crash_loop_crashes=4, window_s=30.0)


def plan(
    home: Path, services: list[ServiceSpec], *, log_max_bytes: int = 0, log_backups: int = 2
) -> SupervisorPlan:
    runtime = RuntimeDir.at(home)
    runtime.prepare()
    return SupervisorPlan(
        state=PidFile.new(runtime, "redis://127.0.0.1:1/0", private_redis=False, gateway_target=""),
        services=services,
        env=dict(os.environ),
        ready_timeout_s=10,
        worker_stop_timeout_s=5,
        log_max_bytes=log_max_bytes,
        log_backups=log_backups,
    )


def service(name: str, *args: str, code: str = SERVICE) -> ServiceSpec:
    return ServiceSpec(name=name, argv=[sys.executable, "-c", code, MARKER, *args], marker=MARKER)


@pytest.fixture
def supervised() -> Iterator[list[Supervisor]]:
    """Supervisors a test started; stopped at the end whatever happened."""
    started: list[Supervisor] = []
    yield started
    for supervisor in started:
        supervisor.stop()


def launch(supervised: list[Supervisor], the_plan: SupervisorPlan, **options: object) -> Supervisor:
    supervisor = Supervisor(the_plan, policy=FAST, stop_on_give_up=False, **options)  # type: ignore[arg-type]
    supervised.append(supervisor)
    supervisor.launch(this_process("supervisor", "python"))
    return supervisor


def step_until(supervisor: Supervisor, condition: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        supervisor.step()
        time.sleep(0.05)


def kill_once_started(home: Path, index: int = 0) -> None:
    """SIGKILL a service once it has printed "started" (its first run is then on record)."""
    log = home / "logs" / f"{pid_file(home).processes[index].name}.log"
    deadline = time.monotonic() + 20
    while "started" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the service did not start"
        time.sleep(0.02)
    os.kill(pid_file(home).processes[index].pid, signal.SIGKILL)


def pid_file(home: Path) -> PidFile:
    state = PidFile.read(home / "sluice.pid")
    assert state is not None
    return state


def test_a_killed_service_is_restarted_and_the_pid_file_says_so(
    tmp_path: Path, supervised: list[Supervisor]
) -> None:
    home = tmp_path / "var"
    supervisor = launch(supervised, plan(home, [service("alpha"), service("beta")]))
    alpha, beta = (ref.pid for ref in pid_file(home).processes)
    os.kill(alpha, signal.SIGKILL)
    step_until(supervisor, lambda: pid_file(home).processes[0].pid != alpha)
    state = pid_file(home)
    assert [ref.name for ref in state.processes] == ["alpha", "beta"]  # the order a stop goes by
    assert state.processes[0].alive()
    assert state.processes[1].pid == beta
    assert state.history_of("alpha").restarts == 1
    assert state.history_of("alpha").last_exit_code == -9
    assert state.history_of("beta").restarts == 0
    lines, healthy = describe(state, now_s=time.time())
    assert healthy
    assert any(line.split()[:2] == ["alpha", "up"] and "-9 (SIGKILL)" in line for line in lines), lines

    pids = [ref.pid for ref in state.processes]
    supervisor.stop()
    assert not (home / "sluice.pid").exists()
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids
    )


def test_a_crash_loop_is_given_up_and_recorded(tmp_path: Path, supervised: list[Supervisor]) -> None:
    home = tmp_path / "var"
    notes: list[str] = []
    supervisor = launch(
        supervised,
        plan(home, [service("alpha", str(tmp_path / "first")), service("beta")]),
        notify=notes.append,
    )
    kill_once_started(home)
    step_until(supervisor, lambda: bool(pid_file(home).history_of("alpha").given_up))
    state = pid_file(home)
    history = state.history_of("alpha")
    assert history.given_up == "it crashed 4 times within 30 s"
    assert history.restarts == 3
    assert history.last_exit_code == 3
    assert notes[-1] == "the alpha exited with code 3; not restarting it: it crashed 4 times within 30 s"
    for _ in range(10):  # given up: no more restarts, the rest still supervised
        supervisor.step()
    assert pid_file(home).history_of("alpha").restarts == 3
    assert state.processes[1].alive()
    lines, healthy = describe(state, now_s=time.time())
    assert not healthy
    assert any(line.split()[:3] == ["alpha", "given", "up"] for line in lines), lines
    assert (
        f"the alpha was given up: it crashed 4 times within 30 s (its log: {home}/logs/alpha.log)"
        in lines[-1]
    )
    assert "cannot start" in (home / "logs" / "alpha.log").read_text()


def test_in_the_foreground_a_crash_loop_is_fatal(tmp_path: Path, supervised: list[Supervisor]) -> None:
    home = tmp_path / "var"
    supervisor = Supervisor(
        plan(home, [service("alpha", str(tmp_path / "first"))]), policy=FAST, stop_on_give_up=True
    )
    supervised.append(supervisor)
    supervisor.launch(this_process("supervisor", "python"))
    kill_once_started(home)
    with pytest.raises(GaveUp) as gave_up:
        step_until(supervisor, lambda: False)
    assert (
        gave_up.value.reason
        == "the alpha exited with code 3; not restarting it: it crashed 4 times within 30 s"
    )
    assert gave_up.value.logs == [home / "logs" / "alpha.log"]


def test_a_growing_log_is_rotated_while_its_writer_goes_on(
    tmp_path: Path, supervised: list[Supervisor]
) -> None:
    home = tmp_path / "var"
    supervisor = launch(supervised, plan(home, [service("chatty", code=CHATTY)], log_max_bytes=20_000))
    live = home / "logs" / "chatty.log"
    rotated = [live.with_name(f"chatty.log.{index}") for index in (1, 2, 3)]
    step_until(supervisor, lambda: rotated[1].exists())  # rotated at least twice
    first_after = int(live.read_text().split()[0]) if live.stat().st_size else None
    step_until(supervisor, lambda: live.stat().st_size > 4096)
    assert not rotated[2].exists(), "sluice_log_backups=2 keeps two copies"
    newest_rotated = int(rotated[0].read_text().splitlines()[-1].split()[0])
    live_lines = live.read_text().splitlines()
    # The writer kept its descriptor and went on at the start of the truncated live file.
    assert int(live_lines[-1].split()[0]) > newest_rotated
    assert first_after is None or first_after > newest_rotated
    assert live.read_bytes()[:1] != b"\0", "no hole before the writer's next line"
