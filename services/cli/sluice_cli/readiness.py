"""Waiting until a fresh start is usable: the manager has registered the startup models, the gateway's
``grpc.health.v1`` says SERVING and every startup model has its minimum workers READY."""

import json
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sluice.redis import keys
from sluice.registry import reader as registry
from sluice.registry.records import StartupReport, VersionRecord, WorkerRecord, WorkerStatus

from sluice_cli.outcome import ModelStatus, StartFailed

# A startup model whose workers failed this many times in a row will not come up: stop waiting.
FAILURES_BEFORE_GIVING_UP = 3


def gateway_serving(target: str, timeout_s: float = 1.0, *, tls: bool = False) -> bool:
    """The gateway's ``grpc.health.v1`` says SERVING. Over TLS (``enable_grpc_ssl``): the port
    completes a TLS handshake offering HTTP/2 (its certificate is not checked: a local probe, and a
    certificate for the service's public name would not match ``target``)."""
    if tls:
        return tls_port_answers(target, timeout_s)
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def tls_port_answers(target: str, timeout_s: float) -> bool:
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection((host, int(port)), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host) as secured,
        ):
            return secured.selected_alpn_protocol() == "h2"
    except (OSError, ValueError):
        return False


def startup_report(client: "redis.Redis", manager_pid: int) -> StartupReport | None:
    """The report of *this* manager (a persisted one from an earlier run does not count)."""
    raw = client.get(keys.STARTUP_REPORT)
    if raw is None:
        return None
    report = StartupReport.from_json(raw)
    return report if report.manager_pid == manager_pid else None


def ready_workers(client: "redis.Redis", model: str, version: str) -> int:
    raw = client.hgetall(keys.workers(model, version))
    records = [WorkerRecord.from_json(value) for value in raw.values()]
    return sum(
        1
        for record in records
        if record.status is WorkerStatus.READY
        and client.exists(keys.heartbeat(model, version, record.worker_id))
    )


def restart_streak(client: "redis.Redis", model: str, version: str) -> tuple[int, str]:
    """(consecutive failures, the log of the worker that failed last) from the manager's restart
    streak: JSON {"failures": n, "last_failure_log": path, ...} (sluice_manager.supervision.worker_state)."""
    raw = client.hget(keys.RESTARTS, f"{model}:{version}")
    if raw is None:
        return 0, ""
    try:
        streak = json.loads(raw)
        return int(streak.get("failures", 0)), str(streak.get("last_failure_log") or "")
    except (ValueError, AttributeError):
        return 0, ""


def model_statuses(client: "redis.Redis", report: StartupReport, logs_dir: Path) -> list[ModelStatus]:
    statuses: list[ModelStatus] = []
    for model in report.models:
        pattern = f"{model.model_name}-{model.version}-*.log"
        logs = sorted((logs_dir / "workers").glob(pattern), key=lambda path: path.stat().st_mtime)
        statuses.append(
            ModelStatus(
                model.model_name,
                model.version,
                model.min_workers,
                ready_workers(client, model.model_name, model.version),
                logs,
            )
        )
    return statuses


def wait_until_ready(
    client: "redis.Redis",
    *,
    gateway_target: str,
    gateway_tls: bool = False,
    manager_pid: int,
    logs_dir: Path,
    timeout_s: float,
    check_children: Callable[[], None],
    sleep_s: float = 0.25,
) -> list[ModelStatus]:
    """Poll until ready; ``check_children`` raises :class:`StartFailed` if a service process died."""
    deadline = time.monotonic() + timeout_s
    extended = False
    report: StartupReport | None = None
    while True:
        check_children()
        try:
            report = startup_report(client, manager_pid)
            statuses = _ready_statuses(client, report, logs_dir, gateway_target, gateway_tls)
            if statuses is not None:
                return statuses
            if report is not None and report.done and not extended and report.models:
                # The models' own startup timeouts bound the wait for their workers.
                timeout = max(_startup_timeout(client, m.model_name, m.version) for m in report.models)
                deadline = max(deadline, time.monotonic() + timeout)
                extended = True
        except redis.RedisError:
            pass  # Redis restarting: keep polling until the deadline
        if time.monotonic() >= deadline:
            raise StartFailed(_timeout_reason(report, gateway_target, gateway_tls))
        time.sleep(sleep_s)


def _ready_statuses(
    client: "redis.Redis",
    report: StartupReport | None,
    logs_dir: Path,
    gateway_target: str,
    gateway_tls: bool,
) -> list[ModelStatus] | None:
    """The startup models' statuses once everything is ready; None while something is missing."""
    if report is None or not report.done:
        return None
    if report.errors:
        raise StartFailed("startup models could not be loaded:\n  " + "\n  ".join(report.errors))
    statuses = model_statuses(client, report, logs_dir)
    _fail_on_crash_loop(client, statuses)
    if all(status.ready for status in statuses) and gateway_serving(gateway_target, tls=gateway_tls):
        return statuses
    return None


def _startup_timeout(client: "redis.Redis", model: str, version: str) -> int:
    raw = client.hget(keys.version_config(model, version), registry.RECORD_FIELD)
    return VersionRecord.from_json(raw).startup_timeout_s if raw is not None else 120


def _fail_on_crash_loop(client: "redis.Redis", statuses: list[ModelStatus]) -> None:
    for status in statuses:
        if status.ready:
            continue
        failures, failed_log = restart_streak(client, status.model_name, status.version)
        if failures >= FAILURES_BEFORE_GIVING_UP:
            # The log of the worker that failed, not the newest one: its replacement may be loading.
            logs = [Path(failed_log)] if failed_log else status.worker_logs[-1:]
            raise StartFailed(
                f"the workers of model {status.model_name} {status.version} keep failing to start", logs
            )


def _timeout_reason(report: StartupReport | None, gateway_target: str, gateway_tls: bool) -> str:
    if report is None or not report.done:
        return "timed out waiting for the manager to register the startup models"
    if not gateway_serving(gateway_target, tls=gateway_tls):
        return f"timed out waiting for the gateway on {gateway_target} to report SERVING"
    return "timed out waiting for the startup models' workers to be READY"
