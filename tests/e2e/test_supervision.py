"""Supervision as `sluice start` runs it: kill -9 of Redis, the manager or the gateway under a light
steady load is restarted, nothing accepted is lost, `sluice status` shows the restarts and `sluice
stop` still stops everything; a start right after the stop works although its ports are in TIME-WAIT;
a service that cannot come back is given up."""

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psutil
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1 import torchserve_management_pb2 as mpb
from sluice.v1 import torchserve_management_pb2_grpc as mpb_grpc

from tests.support.cli_stack import SLUICE, START_TIMEOUT_S, Stack, alive, clean_env
from tests.support.models import batch_recorder_model, write_mar

# Far above the 3 s targets (docs/design.md has the measured times): only a service that does not
# come back at all fails the test.
RECOVERY_BOUND_S = 30.0
CALL_TIMEOUT_S = 30.0
ENQUEUE_FAILED = "Service unavailable: the job queue is unreachable."
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 500)]


@dataclass
class Outcome:
    started_s: float
    ended_s: float
    code: grpc.StatusCode
    details: str = ""


@dataclass
class Load:
    """A few callers in a loop (each waits 50 ms between calls), every answer checked."""

    target: str
    callers: int = 4
    outcomes: list[Outcome] = field(default_factory=list)
    wrong_answers: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> Iterator[None]:
        threads = [threading.Thread(target=self._caller, args=(index,)) for index in range(self.callers)]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(timeout=CALL_TIMEOUT_S + 10)

    def _caller(self, index: int) -> None:
        with grpc.insecure_channel(self.target, options=CHANNEL_OPTIONS) as channel:
            stub = pb_grpc.InferenceAPIsServiceStub(channel)
            sequence = 0
            while not self._stop.is_set():
                sequence += 1
                payload = f"caller {index} call {sequence}".encode()
                started_s = time.monotonic()
                try:
                    reply = stub.Predictions(
                        pb.PredictionsRequest(model_name="recorder", input={"data": payload}),
                        timeout=CALL_TIMEOUT_S,
                    )
                    if reply.prediction != payload:
                        self.wrong_answers.append(f"{payload!r} answered {reply.prediction!r}")
                    self.outcomes.append(Outcome(started_s, time.monotonic(), grpc.StatusCode.OK))
                except grpc.RpcError as error:
                    self.outcomes.append(
                        Outcome(started_s, time.monotonic(), error.code(), error.details() or "")
                    )
                time.sleep(0.05)

    def between(self, start_s: float, end_s: float = float("inf")) -> list[Outcome]:
        return [outcome for outcome in list(self.outcomes) if start_s <= outcome.started_s < end_s]

    def answered_since(self, start_s: float) -> int:
        return sum(1 for outcome in self.between(start_s) if outcome.code is grpc.StatusCode.OK)


def inference_answers(stack: Stack) -> bool:
    """A fresh channel's call (a long-lived channel would wait out its reconnect backoff)."""
    with grpc.insecure_channel(stack.grpc_target) as channel:
        try:
            pb_grpc.InferenceAPIsServiceStub(channel).Predictions(
                pb.PredictionsRequest(model_name="recorder", input={"data": b"probe"}), timeout=2
            )
        except grpc.RpcError:
            return False
    return True


def management_answers(stack: Stack) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{stack.management_port}") as channel:
        try:
            mpb_grpc.ManagementAPIsServiceStub(channel).ListModels(mpb.ListModelsRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return True


def seconds_until(condition: Callable[[], bool], since_s: float, bound_s: float = RECOVERY_BOUND_S) -> float:
    while not condition():
        assert time.monotonic() - since_s < bound_s, "not serving again"
        time.sleep(0.02)
    return time.monotonic() - since_s


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    built = Stack.create(tmp_path)
    write_mar(batch_recorder_model(sleep_s=0.2), built.store)
    try:
        yield built
    finally:
        built.stop()


def test_killed_services_come_back_under_load_and_nothing_accepted_is_lost(stack: Stack) -> None:
    stack.start()
    load = Load(stack.grpc_target)
    recovery_s: dict[str, float] = {}
    phases: dict[str, tuple[float, float]] = {}
    running = load.run()
    next(running)
    try:
        time.sleep(1)
        for name, serving in (
            ("redis", inference_answers),
            ("manager", management_answers),
            ("gateway", inference_answers),
        ):
            old_pid = stack.pid_of(name)
            killed_s = time.monotonic()
            os.kill(old_pid, signal.SIGKILL)
            time.sleep(0.05)
            recovery_s[name] = seconds_until(lambda: serving(stack), killed_s)  # noqa: B023
            assert stack.pid_of(name) != old_pid
            # Some calls answered after the recovery, through the load's own channels.
            since_s = time.monotonic()
            seconds_until(lambda: load.answered_since(since_s) >= 8, since_s)  # noqa: B023
            phases[name] = (killed_s - 0.5, time.monotonic())
    finally:
        next(running, None)
    print(f"\nrecovery after kill -9 (s): {recovery_s}")

    assert load.wrong_answers == []
    unexpected = [o for o in load.outcomes if o.code not in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE)]
    assert unexpected == [], "an accepted call was lost or failed otherwise"
    redis_phase = load.between(*phases["redis"])
    # With AOF on, a call Redis accepted before its crash is answered; an UNAVAILABLE in that phase is
    # a call whose job never got in.
    refused = [o for o in redis_phase if o.code is grpc.StatusCode.UNAVAILABLE]
    assert [o.details for o in refused if not o.details.startswith(ENQUEUE_FAILED + "\n")] == []
    killed_s = phases["redis"][0] + 0.5
    spanning = [o for o in redis_phase if o.started_s < killed_s < o.ended_s]
    assert [o for o in spanning if o.code is grpc.StatusCode.OK], "no call in flight at the crash answered"
    # The manager is not on the data path: its crash costs no call (those still in flight when the
    # gateway was killed next are judged above).
    manager_end_s = phases["manager"][1]
    manager_phase = [o for o in load.between(*phases["manager"]) if o.ended_s < manager_end_s]
    assert [o for o in manager_phase if o.code is not grpc.StatusCode.OK] == []

    status = stack.sluice("status")
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ("redis", "manager", "gateway"):
        [row] = [line.split() for line in status.stdout.splitlines() if line.split()[:1] == [name]]
        assert row[1] == "up", status.stdout
        assert row[2] == str(stack.pid_of(name))
        assert row[-3:] == ["1", "-9", "(SIGKILL)"], status.stdout
    log = (stack.home / "logs" / "supervisor.log").read_text()
    assert log.count("service exited; restarting it") == 3

    # Clients keep connections open through the stop: the servers close first and leave their end in
    # TIME-WAIT, which must not fail the next start's port check.
    ports = (stack.grpc_port, stack.management_port)
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for port in ports]
    pids = stack.all_pids()
    stopped = stack.sluice("stop", timeout_s=120)
    assert stopped.returncode == 0, stopped.stderr
    for connection in held:
        with connection:
            while connection.recv(65536):  # what the server sent before it closed its end
                pass
    assert wait_dead(pids) == []
    assert not (stack.home / "sluice.pid").exists()
    not_running = stack.sluice("status")
    assert (not_running.returncode, not_running.stdout) == (3, "Sluice is not running.\n")
    assert all(lingering(port) for port in ports), "no TIME-WAIT: the test would prove nothing"
    stack.start()
    assert inference_answers(stack)


def test_a_supervisor_killed_by_the_user_restarts_nothing_and_stop_still_works(stack: Stack) -> None:
    stack.start()
    supervisor = stack.supervisor_pid()
    os.kill(supervisor, signal.SIGKILL)
    assert wait_dead([supervisor]) == []
    gateway = stack.pid_of("gateway")
    os.kill(gateway, signal.SIGKILL)
    status = stack.sluice("status")
    assert status.returncode == 1
    assert "the supervisor is not running" in status.stdout
    time.sleep(2)
    assert stack.pid_of("gateway") == gateway, "nothing restarts without the supervisor"
    pids = stack.all_pids()
    stopped = stack.sluice("stop", timeout_s=120)
    assert stopped.returncode == 0, stopped.stderr
    assert wait_dead(pids) == []


def test_in_the_foreground_a_crash_loop_stops_sluice_with_the_reason(stack: Stack) -> None:
    process = subprocess.Popen(
        [
            str(SLUICE),
            "start",
            "--foreground",
            "--model-store",
            "store",
            "--models",
            "all",
            "--disable-token-auth",
        ],
        cwd=stack.root,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Ctrl-C stops Sluice" not in (line := process.stdout.readline()):
            assert line, "the foreground start ended"
            assert time.monotonic() < deadline, "no foreground start"
        pids = stack.all_pids()
        # While the CLI is paused, its gateway dies and someone else takes the gateway's port: every
        # restart then fails at once.
        process.send_signal(signal.SIGSTOP)
        try:
            os.kill(stack.pid_of("gateway"), signal.SIGKILL)
            squatter = listen_when_free(stack.grpc_port)
        finally:
            process.send_signal(signal.SIGCONT)
        with squatter:
            rest, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, rest
    assert "the gateway exited with code -9 (SIGKILL); restarting it" in rest
    assert "not restarting it: it crashed 5 times within 60 s; stopping Sluice" in rest
    assert f"--- last lines of {stack.home / 'logs' / 'gateway.log'} ---" in rest
    assert "Traceback" not in rest
    assert wait_dead(pids) == []
    assert not (stack.home / "sluice.pid").exists()


def listen_when_free(port: int, timeout_s: float = 10) -> socket.socket:
    """Listen on ``port`` once its killed owner let go of it (the last of its threads may still be
    exiting when its main thread shows as a zombie)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
            listener.listen()
            return listener
        except OSError:
            listener.close()
            assert time.monotonic() < deadline, f"port {port} still taken"
            time.sleep(0.05)


def wait_dead(pids: list[int], timeout_s: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def lingering(port: int) -> bool:
    """A connection in TIME-WAIT on ``port`` (grpc listens on dual-stack sockets: tcp6 counts)."""
    return any(
        conn.status == psutil.CONN_TIME_WAIT and conn.laddr and conn.laddr.port == port
        for conn in psutil.net_connections(kind="tcp")
    )
