"""``sluice stop``: the supervisor first (it stops the services itself, so nothing restarts them
meanwhile), then whatever is left: gateway, then manager (which stops its workers), then Redis, each by
pid with a bounded wait; workers a dead manager left behind are killed before Redis goes."""

import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path

import psutil
from sluice.auth.key_material import remove_key_file
from sluice.redis import keys

from sluice_cli import output
from sluice_cli.children import Children, kill_process, stop_process
from sluice_cli.runtime import PidFile, ProcessRef, RuntimeDir, remove_pid_file
from sluice_cli.settings import CliSettings

# The gateway drains in-flight calls (shutdown_grace_s, 30 s by default).
GATEWAY_STOP_TIMEOUT_S = 40.0
REDIS_STOP_TIMEOUT_S = 20.0
# On top of the manager's own bound for draining its workers.
MANAGER_STOP_MARGIN_S = 15.0


def stop(settings: CliSettings) -> int:
    runtime = RuntimeDir.at(settings.home)
    state = PidFile.read(runtime.pid_file)
    if state is None:
        output.info("Sluice is not running.")
        return 0
    output.info("Stopping Sluice ...")
    _stop_supervisor(state, settings.worker_stop_timeout_s)
    # Read again: the supervisor may have restarted a service since (and if it stopped everything,
    # it removed the file; what the first read listed is then gone too).
    state = PidFile.read(runtime.pid_file) or state
    stop_all(state, settings.worker_stop_timeout_s)
    remove_pid_file(runtime.pid_file)
    output.info("Sluice stopped.")
    return 0


def _stop_supervisor(state: PidFile, worker_stop_timeout_s: float) -> None:
    """Ask the supervisor (the detached one, or `sluice start --foreground`) to stop the services in
    order, and wait; one that does not stop in time is killed, so that it restarts nothing while the
    services are stopped here."""
    supervisor = state.supervisor
    if supervisor is None or supervisor.pid == os.getpid() or supervisor.process() is None:
        return
    os.kill(supervisor.pid, signal.SIGTERM)
    deadline = time.monotonic() + stop_budget_s(worker_stop_timeout_s)
    while time.monotonic() < deadline and supervisor.alive():
        time.sleep(0.1)
    hung = supervisor.process()
    if hung is not None:
        with contextlib.suppress(psutil.Error):
            hung.kill()


def stop_budget_s(worker_stop_timeout_s: float) -> float:
    """How long stopping every service in order may take."""
    return GATEWAY_STOP_TIMEOUT_S + REDIS_STOP_TIMEOUT_S + worker_stop_timeout_s + MANAGER_STOP_MARGIN_S


def stop_all(state: PidFile, worker_stop_timeout_s: float, children: Children | None = None) -> None:
    """Stop what ``state`` lists, in reverse start order."""
    for ref in reversed(state.processes):
        if ref.name == "redis":
            kill_leftover_workers(state.redis_url)
        stop_process(ref, _timeout_s(ref, worker_stop_timeout_s), children)
    if not state.private_redis:
        kill_leftover_workers(state.redis_url)
    if state.key_file:
        # As TorchServe deletes key_file.json at shutdown; the next start creates new keys.
        remove_key_file(Path(state.key_file))


def _timeout_s(ref: ProcessRef, worker_stop_timeout_s: float) -> float:
    if ref.name == "manager":
        return worker_stop_timeout_s + MANAGER_STOP_MARGIN_S
    if ref.name == "gateway":
        return GATEWAY_STOP_TIMEOUT_S
    return REDIS_STOP_TIMEOUT_S


def kill_leftover_workers(redis_url: str) -> int:
    """SIGKILL workers on this host that a manager started and did not stop (it was killed, or it
    timed out). Identified by pid, start time and a word of the command line (``--worker-id <id>`` or
    the record's marker) from the launch records."""
    # Here: `sluice start` reaches this module before it needs Redis (its start time).
    import redis
    from sluice.redis.client import connect_sync

    try:
        client = connect_sync(redis_url, timeout_s=2.0)
        raw = client.hgetall(keys.LAUNCHED_WORKERS)
        client.close()
    except redis.RedisError:
        return 0
    host = socket.gethostname()
    killed = 0
    for value in raw.values():
        ref = _worker_ref(value, host)
        if ref is not None and ref.alive():
            kill_process(ref)
            killed += 1
    return killed


def _worker_ref(raw: bytes | str, host: str) -> ProcessRef | None:
    # A LaunchRecord of the process launcher (sluice_manager.supervision.launchers), read as plain
    # JSON: the CLI does not import the manager.
    try:
        record = json.loads(raw)
        details = record.get("details") or {}
        if record.get("launcher") != "process" or record["placement"].get("host") != host:
            return None
        pid = int(record["handle"])
        return ProcessRef(
            name=f"worker {record['worker_id']}",
            pid=pid,
            start_time=float(details.get("process_start_time") or _current_start_time(pid)),
            # A worker that began as the standby has the standby's command line (its record says so).
            marker=details.get("marker") or f"--worker-id {record['worker_id']}",
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _current_start_time(pid: int) -> float:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0
