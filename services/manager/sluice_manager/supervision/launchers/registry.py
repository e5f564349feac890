"""Launchers by name (the ``sluice_launcher`` setting): each entry builds its launcher from the
manager's settings. Adding a launcher (Kubernetes, say) adds one entry here and one module beside."""

import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from sluice.lifecycle.worker_standby import STANDBY_FLAG
from sluice.log import get_logger

from sluice_manager.settings import ManagerSettings
from sluice_manager.supervision import gpus
from sluice_manager.supervision.launchers import docker, external, process, swarm, swarm_spec
from sluice_manager.supervision.launchers.base import Launcher
from sluice_manager.supervision.launchers.standby import Standby

log = get_logger(__name__)


@dataclass(frozen=True)
class LauncherContext:
    settings: ManagerSettings
    # The manager's own environment (process workers inherit it).
    environ: Mapping[str, str]
    host: str
    # Labels one manager cluster's containers (see sluice_manager.supervision.cluster).
    cluster_id: str


Factory = Callable[[LauncherContext], Awaitable[Launcher]]


def worker_environment(settings: ManagerSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """A local worker's environment: the manager's, plus the Redis it was told to use."""
    env = dict(environ)
    env.update(worker_settings_env(settings))
    env["SLUICE_HOME"] = str(settings.home.absolute())
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def worker_settings_env(settings: ManagerSettings) -> dict[str, str]:
    """What every worker must be told, wherever it runs."""
    return {
        "SLUICE_REDIS_URL": settings.redis_url,
        "SLUICE_LOG_FORMAT": settings.log_format,
        "SLUICE_LOG_LEVEL": settings.log_level,
    }


def tracing_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The manager's ``OTEL_*`` variables, for worker containers (process workers inherit them): a
    traced cluster's workers trace too. ``OTEL_SERVICE_NAME`` stays behind (workers name themselves)."""
    return {
        name: value
        for name, value in environ.items()
        if name.startswith("OTEL_") and name != "OTEL_SERVICE_NAME"
    }


def extra_worker_env(spec: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``sluice_worker_env``: comma-separated ``NAME=VALUE`` (set) or ``NAME`` (copied from the
    manager's environment when present) for worker containers."""
    env: dict[str, str] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if sep:
            env[name.strip()] = value
        elif name in environ:
            env[name] = environ[name]
    return env


def _docker_gpu_ids(settings: ManagerSettings) -> tuple[int, ...]:
    """The engine's host is not the manager's to look at (the manager usually runs in a container
    without GPUs): ``number_of_gpu`` says how many GPUs it has; unset, what nvidia-smi shows here."""
    if settings.number_of_gpu is not None:
        return tuple(range(settings.number_of_gpu))
    return gpus.visible_gpu_ids()


async def _process(context: LauncherContext) -> Launcher:
    settings = context.settings
    env = worker_environment(settings, context.environ)
    standby = None
    if settings.worker_standby:
        standby = Standby(
            [settings.worker_python, "-m", settings.worker_module, STANDBY_FLAG],
            env,
            settings.logs_path / "workers" / "standby.log",
        )
    return process.ProcessLauncher(
        command=process.worker_command(settings.worker_python, settings.worker_module),
        env=env,
        logs_dir=settings.logs_path,
        host=context.host,
        gpu_ids=gpus.gpu_ids(settings.number_of_gpu, gpus.visible_gpu_ids()),
        standby=standby,
    )


async def _external(context: LauncherContext) -> Launcher:
    return external.ExternalLauncher(context.host)


def container_worker_env(context: LauncherContext) -> dict[str, str]:
    """A worker container's (or Swarm service's) environment: what every worker is told, the
    manager's tracing settings, ``sluice_worker_env``, and JSON logs."""
    env = {
        **worker_settings_env(context.settings),
        **tracing_env(context.environ),
        **extra_worker_env(context.settings.worker_env, context.environ),
    }
    env["SLUICE_LOG_FORMAT"] = "json"
    return env


async def _docker(context: LauncherContext) -> Launcher:
    import aiodocker

    settings = context.settings
    client = aiodocker.Docker(url=settings.docker_host or None)
    network = settings.docker_network or await docker.own_network(client, socket.gethostname())
    env = container_worker_env(context)
    config = docker.DockerConfig(
        image=settings.worker_image,
        cluster_id=context.cluster_id,
        network=network,
        env=env,
        cache_volume=settings.docker_model_cache_volume,
        read_only_root=settings.docker_read_only_root,
        gpu_ids=_docker_gpu_ids(settings),
    )
    return docker.DockerLauncher(client, config)


async def _swarm(context: LauncherContext) -> Launcher:
    import aiodocker

    settings = context.settings
    if not settings.docker_network:
        raise OSError("the swarm launcher needs sluice_docker_network: the overlay network workers join")
    config = swarm_spec.SwarmConfig(
        image=settings.worker_image,
        cluster_id=context.cluster_id,
        network=settings.docker_network,
        env=container_worker_env(context),
        cache_volume=settings.docker_model_cache_volume,
        read_only_root=settings.docker_read_only_root,
        constraints=tuple(c.strip() for c in settings.swarm_constraints.split(",") if c.strip()),
        gpu_ids=tuple(range(settings.number_of_gpu or 0)),
        gpu_kind=settings.swarm_gpu_kind,
        stop_grace_s=settings.worker_stop_timeout_s,
    )
    return swarm.SwarmLauncher(aiodocker.Docker(url=settings.docker_host or None), config)


FACTORIES: dict[str, Factory] = {
    process.NAME: _process,
    external.NAME: _external,
    docker.NAME: _docker,
    swarm.NAME: _swarm,
}


async def build_launcher(context: LauncherContext) -> Launcher:
    """The launcher ``sluice_launcher`` names (the settings allow only the names above)."""
    return await FACTORIES[context.settings.launcher](context)
