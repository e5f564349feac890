"""What ``sluice start`` hands its supervisor: the services to run (command lines, markers), their
environment, the pid file to keep, and the limits. JSON, so that the detached supervisor receives it
on its stdin: the environment carries the private Redis's password, which must stay out of argv and
out of files other users could read."""

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from sluice_cli.outcome import ModelStatus
from sluice_cli.runtime import PidFile, RuntimeDir
from sluice_cli.services import (
    StartOptions,
    clear_redis_data,
    python_service,
    redis_command,
    service_env,
    write_redis_config,
)
from sluice_cli.settings import CliSettings

# Time for the services to come up, on top of the models' startup timeout.
SERVICES_START_MARGIN_S = 30.0


class ServiceSpec(BaseModel):
    name: str
    argv: list[str]
    # A word of its command line (see ProcessRef.marker).
    marker: str


class SupervisorPlan(BaseModel):
    # The pid file as it starts (no processes yet).
    state: PidFile
    services: list[ServiceSpec]
    env: dict[str, str]
    ready_timeout_s: float
    worker_stop_timeout_s: float
    log_max_bytes: int
    log_backups: int

    @property
    def runtime(self) -> RuntimeDir:
        return RuntimeDir.at(Path(self.state.runtime_dir))


class StartReport(BaseModel):
    """The detached supervisor's answer to ``sluice start``: serving, or why not."""

    ok: bool
    reason: str = ""
    logs: list[str] = []
    statuses: list[ModelStatus] = []


def token_auth_on(settings: CliSettings, options: StartOptions) -> bool:
    """--disable-token-auth can only switch token authorization off."""
    return settings.token_auth_enabled and not options.disable_token_auth


def build_plan(
    settings: CliSettings,
    options: StartOptions,
    environ: Mapping[str, str],
    runtime: RuntimeDir,
    *,
    fresh: bool,
) -> SupervisorPlan:
    """The plan of a start; writes the private Redis's config (a new password) and, with ``fresh``
    (--ncs), empties its data folder."""
    private = settings.private_redis
    password = write_redis_config(runtime.redis_config) if private else ""
    redis_url = settings.service_redis_url(runtime.redis_socket, password)
    state = PidFile.new(
        runtime,
        redis_url,
        private_redis=private,
        gateway_target=settings.gateway_target,
        gateway_tls=settings.enable_grpc_ssl,
    )
    key_file = settings.key_file.absolute() if token_auth_on(settings, options) else None
    state.key_file = str(key_file or "")
    services = []
    if private:
        if fresh:
            clear_redis_data(runtime.redis_data)
        command = redis_command(
            settings.redis_port, runtime.redis_data, runtime.redis_config, runtime.redis_socket
        )
        services.append(ServiceSpec(name="redis", argv=command, marker="redis-server"))
    # The services start while Redis comes up: their imports take far longer than Redis's start, and
    # both wait out a Redis that does not answer yet.
    services.append(
        ServiceSpec(name="manager", argv=python_service("sluice_manager"), marker="sluice_manager")
    )
    services.append(
        ServiceSpec(name="gateway", argv=python_service("sluice_gateway"), marker="sluice_gateway")
    )
    return SupervisorPlan(
        state=state,
        services=services,
        env=service_env(environ, options, home=runtime.home, redis_url=redis_url, key_file=key_file),
        ready_timeout_s=settings.default_startup_timeout_s + SERVICES_START_MARGIN_S,
        worker_stop_timeout_s=settings.worker_stop_timeout_s,
        log_max_bytes=settings.log_max_bytes,
        log_backups=settings.log_backups,
    )
