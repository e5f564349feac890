"""``sluice start``: private Redis (unless ``sluice_redis_url``), manager, gateway; wait until they
serve; print where everything listens; return, or stay attached with ``--foreground``."""

import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from sluice_cli import output
from sluice_cli.children import Children
from sluice_cli.runtime import PidFile, RuntimeDir, remove_pid_file, this_process
from sluice_cli.services import (
    StartOptions,
    clear_redis_data,
    port_in_use,
    python_service,
    redis_command,
    service_env,
    write_redis_config,
)
from sluice_cli.settings import LOOPBACK, CliSettings
from sluice_cli.status import ModelStatus, StartFailed
from sluice_cli.stop import stop_all

REDIS_START_TIMEOUT_S = 10.0
# Time for the services to come up, on top of the models' startup timeout.
SERVICES_START_MARGIN_S = 30.0


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop in order."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


def start(
    settings: CliSettings, options: StartOptions, environ: Mapping[str, str], *, foreground: bool, fresh: bool
) -> int:
    runtime = RuntimeDir.at(settings.home)
    runtime.prepare()
    previous = PidFile.read(runtime.pid_file)
    if previous is not None and previous.live():
        output.error(f"Sluice is already running (pid file {runtime.pid_file}). Stop it with: sluice stop")
        return 1
    remove_pid_file(runtime.pid_file)
    problem = _preflight(settings, options)
    if problem:
        output.error(problem)
        return 1
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    private = not settings.external_redis_url
    password = write_redis_config(runtime.redis_config) if private else ""
    redis_url = settings.service_redis_url(runtime.redis_socket, password)
    state = PidFile.new(runtime, redis_url, private_redis=private, gateway_target=settings.gateway_target)
    if foreground:
        state.owner = this_process("cli", "sluice")
    children = Children()
    try:
        statuses = _launch(settings, options, environ, runtime, state, children, fresh=fresh)
    except StartFailed as failure:
        output.start_failed(failure, runtime)
        _stop(state, children, settings, runtime)
        return 1
    except Interrupted:
        output.info("Interrupted; stopping what was started.")
        _stop(state, children, settings, runtime)
        return 130
    output.serving(settings, runtime, state, statuses)
    if not foreground:
        return 0
    return _attached(state, children, settings, runtime)


def _preflight(settings: CliSettings, options: StartOptions) -> str:
    if options.models and settings.model_store is None:
        return (
            "--models needs a model store: pass --model-store DIR (or set model_store in config.properties)"
        )
    if settings.model_store is not None and not settings.model_store.is_dir():
        return f"model store {settings.model_store} is not a folder"
    if not settings.external_redis_url and port_in_use(LOOPBACK, settings.redis_port):
        return f"port {settings.redis_port} for the private Redis is in use (set sluice_redis_port)"
    host = settings.gateway_target.rsplit(":", 1)[0]
    if port_in_use(host, settings.grpc_inference_port):
        return f"the gRPC inference port {settings.gateway_target} is in use (set grpc_inference_port)"
    management_host = _local_host(settings.grpc_management_address)
    if port_in_use(management_host, settings.grpc_management_port):
        return (
            f"the gRPC management port {management_host}:{settings.grpc_management_port} is in use "
            "(set grpc_management_port)"
        )
    return ""


def _local_host(host: str) -> str:
    return LOOPBACK if host in ("0.0.0.0", "::", "") else host


def _launch(
    settings: CliSettings,
    options: StartOptions,
    environ: Mapping[str, str],
    runtime: RuntimeDir,
    state: PidFile,
    children: Children,
    *,
    fresh: bool,
) -> list[ModelStatus]:
    key_file = settings.key_file.absolute() if token_auth_on(settings, options) else None
    state.key_file = str(key_file or "")
    env = service_env(environ, options, home=runtime.home, redis_url=state.redis_url, key_file=key_file)
    if state.private_redis:
        if fresh:
            clear_redis_data(runtime.redis_data)
        command = redis_command(
            settings.redis_port, runtime.redis_data, runtime.redis_config, runtime.redis_socket
        )
        _spawn(state, children, runtime, "redis", command, env, marker="redis-server")
    # The services start while Redis comes up: their imports take far longer than Redis's start, and
    # both wait out a Redis that does not answer yet.
    _spawn(
        state, children, runtime, "manager", python_service("sluice_manager"), env, marker="sluice_manager"
    )
    _spawn(
        state, children, runtime, "gateway", python_service("sluice_gateway"), env, marker="sluice_gateway"
    )
    if state.private_redis:
        _wait_for_redis(state.redis_url, state, children)
    manager = state.get("manager")
    assert manager is not None
    # Imported once the children run: grpc and redis take a good part of the CLI's own start.
    import redis

    from sluice_cli.readiness import wait_until_ready

    client = redis.Redis.from_url(state.redis_url, socket_timeout=2.0)
    try:
        return wait_until_ready(
            client,
            gateway_target=settings.gateway_target,
            manager_pid=manager.pid,
            logs_dir=runtime.logs,
            timeout_s=settings.default_startup_timeout_s + SERVICES_START_MARGIN_S,
            check_children=lambda: _check_children(state, children),
        )
    finally:
        client.close()


def token_auth_on(settings: CliSettings, options: StartOptions) -> bool:
    """--disable-token-auth can only switch token authorization off."""
    return settings.token_auth_enabled and not options.disable_token_auth


def _spawn(
    state: PidFile,
    children: Children,
    runtime: RuntimeDir,
    name: str,
    argv: list[str],
    env: Mapping[str, str],
    *,
    marker: str,
) -> None:
    try:
        ref = children.spawn(name, argv, env=env, log_file=runtime.log_file(name), marker=marker)
    except OSError as exc:
        raise StartFailed(f"could not run {argv[0]}: {exc.strerror}") from None
    state.processes.append(ref)
    # Written after each child, so that `sluice stop` can clean up even after a half-done start.
    state.write(runtime.pid_file)


def _wait_for_redis(url: str, state: PidFile, children: Children) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    deadline = time.monotonic() + REDIS_START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            _check_children(state, children)
            try:
                if client.ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
    finally:
        client.close()
    ref = state.get("redis")
    raise StartFailed("redis-server did not answer", [Path(ref.log_file)] if ref else [])


def _check_children(state: PidFile, children: Children) -> None:
    for ref in state.processes:
        if not children.running(ref):
            code = children.exit_code(ref)
            suffix = f" with code {code}" if code is not None else ""
            raise StartFailed(f"the {ref.name} exited{suffix}", [Path(ref.log_file)])


def _attached(state: PidFile, children: Children, settings: CliSettings, runtime: RuntimeDir) -> int:
    output.info("Running in the foreground; Ctrl-C stops Sluice.")
    try:
        while True:
            try:
                _check_children(state, children)
            except StartFailed as failure:
                output.stopped_unexpectedly(failure)
                _stop(state, children, settings, runtime)
                return 1
            time.sleep(0.5)
    except Interrupted:
        output.info("Stopping Sluice ...")
        _stop(state, children, settings, runtime)
        output.info("Sluice stopped.")
        return 0


def _stop(state: PidFile, children: Children, settings: CliSettings, runtime: RuntimeDir) -> None:
    # An orderly stop must not be cut short by a second Ctrl-C; every wait in it is bounded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop_all(state, settings, children)
    remove_pid_file(runtime.pid_file)
    sys.stdout.flush()
