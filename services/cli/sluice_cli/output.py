"""Everything the CLI prints: plain lines, no tracebacks."""

import sys
from pathlib import Path

from sluice.redis.url import redacted

from sluice_cli.children import log_tail
from sluice_cli.outcome import Failure, ModelStatus, StartFailed
from sluice_cli.runtime import PidFile, RuntimeDir
from sluice_cli.settings import LOOPBACK, CliSettings

TAIL_LINES = 20


def info(message: str) -> None:
    print(message, flush=True)


def error(message: str) -> None:
    print(f"sluice: {message}", file=sys.stderr, flush=True)


def serving(settings: CliSettings, runtime: RuntimeDir, state: PidFile, statuses: list[ModelStatus]) -> None:
    redis_note = (
        f"private, also on {LOOPBACK}:{settings.redis_port} with the password in {runtime.redis_config}, "
        f"AOF in {runtime.redis_data}"
        if state.private_redis
        else "external"
    )
    management = (
        f"gRPC {settings.grpc_management_address}:{settings.grpc_management_port}, "
        f"REST {settings.management_address}"
    )
    lines = [
        "Sluice is serving.",
        f"  gRPC inference   {settings.gateway_target}  (TorchServe and KServe v2 inference, health)",
        f"  REST inference   {settings.inference_address}  (TorchServe and KServe v2 REST)",
        f"  management       {management}  (TorchServe management API)",
        f"  Redis            {redacted(state.redis_url)}  ({redis_note})",
        f"  tokens           {_tokens(state)}",
    ]
    if statuses:
        for index, status in enumerate(statuses):
            label = "  models         " if index == 0 else "                 "
            lines.append(
                f"{label}  {status.model_name} {status.version}: "
                f"{status.ready_workers} worker(s) READY (min {status.min_workers})"
            )
    else:
        lines.append("  models           none loaded at startup")
    lines += [
        f"  logs             {runtime.logs}/",
        f"  pid file         {runtime.pid_file}",
        "Stop it with: sluice stop",
    ]
    info("\n".join(lines))


def _tokens(state: PidFile) -> str:
    if not state.key_file:
        return "OFF: anyone who reaches the ports can use every API"
    return f"on: keys in {state.key_file} (send Authorization: Bearer <key>)"


def start_failed(failure: StartFailed, runtime: RuntimeDir) -> None:
    error(f"could not start: {failure.reason}")
    logs = list(failure.logs) or [runtime.log_file("manager")]
    for path in logs:
        _print_tail(Path(path))
    info(f"All logs are in {runtime.logs}/")


def stopped_unexpectedly(failure: Failure) -> None:
    error(f"{failure.reason}; stopping Sluice")
    for path in failure.logs:
        _print_tail(Path(path))


def _print_tail(path: Path) -> None:
    lines = log_tail(path, TAIL_LINES)
    if not lines:
        return
    print(f"--- last lines of {path} ---", file=sys.stderr)
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    sys.stderr.flush()
