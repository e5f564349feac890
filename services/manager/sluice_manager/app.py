"""The manager process, wired: Redis, lease, launcher, reconcile loop, management API (gRPC, REST and
the Celery task worker), startup models, shutdown.

The management API is served by the manager holding the lease. SIGTERM / SIGINT: close the management
ports (in-flight calls get ``api_grace_s``), stop reconciling, SIGTERM the workers (they drain), wait
up to ``worker_stop_timeout_s``, SIGKILL stragglers, stop the task worker, release the lease, exit 0.
"""

import asyncio
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sluice.backoff import Backoff
from sluice.log import get_logger
from sluice.redis_client import connect
from sluice.redis_url import redacted
from sluice.worker_standby import STANDBY_FLAG

from sluice_manager.archives import ExtractionLimits
from sluice_manager.control_plane import ControlPlane, ControlPlaneConfig
from sluice_manager.external_launcher import ExternalLauncher
from sluice_manager.launcher import Launcher
from sluice_manager.lease import ManagerLease
from sluice_manager.load_models import startup_specs
from sluice_manager.management_api import ApiSeams, ManagementApi
from sluice_manager.policy import Timing
from sluice_manager.process_launcher import ProcessLauncher, worker_command
from sluice_manager.reconciler import Reconciler, ReconcilerConfig
from sluice_manager.security import ManagerSecurity, manager_security, warn_exposure
from sluice_manager.settings import ManagerSettings
from sluice_manager.startup import load_startup_models, remove_unused_model_dirs
from sluice_manager.version_config import ServerDefaults, parse_models_json
from sluice_manager.waiting import finish, wait_any

log = get_logger(__name__)


# In-flight management calls get this long to finish after SIGTERM.
API_GRACE_S = 5.0


class ConfigError(Exception):
    """A setting that makes starting pointless; reported as one line, without a traceback."""


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def control_config(settings: ManagerSettings) -> ControlPlaneConfig:
    try:
        models_json = parse_models_json(settings.models)
    except ValueError as exc:
        raise ConfigError(f"invalid `models` setting: {exc}") from None
    return ControlPlaneConfig(
        model_store=settings.model_store.absolute() if settings.model_store else None,
        models_dir=settings.models_path,
        limits=ExtractionLimits(
            max_total_bytes=settings.archive_max_bytes,
            max_entries=settings.archive_max_entries,
            max_ratio=settings.archive_max_ratio,
        ),
        defaults=ServerDefaults(
            default_workers_per_model=settings.default_workers_per_model,
            job_queue_size=settings.job_queue_size,
            default_response_timeout_s=settings.default_response_timeout_s,
            default_startup_timeout_s=settings.default_startup_timeout_s,
            service_envelope=settings.service_envelope,
            default_service_handler=settings.default_service_handler,
            number_of_gpu=settings.number_of_gpu,
        ),
        models_json=models_json,
        lock_wait_s=settings.task_lock_wait_s,
    )


def worker_environment(settings: ManagerSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """The manager's environment plus what a worker must see (the Redis it was told to use)."""
    env = dict(environ)
    env["SLUICE_REDIS_URL"] = settings.redis_url
    env["SLUICE_HOME"] = str(settings.home.absolute())
    env["SLUICE_LOG_FORMAT"] = settings.log_format
    env["SLUICE_LOG_LEVEL"] = settings.log_level
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Manager:
    def __init__(
        self, settings: ManagerSettings, environ: Mapping[str, str], *, api_seams: ApiSeams | None = None
    ) -> None:
        self.settings = settings
        self.host = socket.gethostname()
        self.stop = asyncio.Event()
        self.redis: aioredis.Redis = connect(settings.redis_url)
        self.launcher = self._launcher(environ)
        self.reconciler = Reconciler(
            self.redis,
            self.launcher,
            ReconcilerConfig(
                timing=Timing(settings.heartbeat_grace_s, settings.worker_stop_timeout_s),
                reconcile_interval_s=settings.reconcile_interval_s,
                cpu_count=cpu_count(),
                number_of_gpu=settings.number_of_gpu,
            ),
            host=self.host,
        )
        self.control = ControlPlane(
            self.redis, control_config(settings), wake=self.reconciler.wake, host=self.host
        )
        self.lease = ManagerLease(self.redis, host=self.host, pid=os.getpid(), ttl_s=settings.lease_ttl_s)
        # Tests that pass their own seams get no token authorization (and no key file).
        self.security = ManagerSecurity() if api_seams is not None else manager_security(settings, self.redis)
        self.api = ManagementApi(
            settings,
            self.redis,
            host=self.host,
            wake=self.reconciler.wake,
            environ=environ,
            seams=api_seams or self.security.seams,
        )
        self._api_started = False

    def _launcher(self, environ: Mapping[str, str]) -> Launcher:
        if self.settings.launcher == "external":
            return ExternalLauncher()
        if self.settings.launcher == "docker":
            raise ConfigError("the docker launcher is not available yet; use process or external")
        standby = [self.settings.worker_python, "-m", self.settings.worker_module, STANDBY_FLAG]
        return ProcessLauncher(
            command=worker_command(self.settings.worker_python, self.settings.worker_module),
            standby_command=standby if self.settings.worker_standby else None,
            env=worker_environment(self.settings, environ),
            logs_dir=self.settings.logs_path,
            host=self.host,
            on_exit=lambda worker_id, code: self.reconciler.on_worker_exit(worker_id, code),
        )

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        log.info(
            "manager starting",
            launcher=self.launcher.name,
            redis=redacted(self.settings.redis_url),
            model_store=str(self.settings.model_store or ""),
            models_dir=str(self.settings.models_path),
        )
        models_dir_ok(self.settings.models_path)
        warn_exposure(self.settings)
        try:
            if await self._take_lease():
                await self._serve()
        finally:
            await self._shutdown()
        return 0

    async def _take_lease(self) -> bool:
        """Wait for Redis and for the lease (another manager may hold it); False if stopped first."""
        backoff = Backoff(first_s=0.1, cap_s=2.0)
        while not self.stop.is_set():
            try:
                if await self.lease.hold():
                    return True
            except RedisError as exc:
                log.warning("waiting for redis", error=str(exc))
            await wait_any(self.stop, timeout_s=backoff.next_delay_s())
        return False

    async def _serve(self) -> None:
        if not await self._retrying(self._prepare, "adopt workers"):
            return
        if not await self._retrying(self._prepare_keys, "prepare token keys"):
            return
        await self._start_api()
        startup = asyncio.create_task(self._retrying(self._load_startup_models, "load startup models"))
        loop_task = await self._reconcile_until_stopped()
        log.info("manager stopping")
        # The loop sees `stop` and ends after its current pass; registration is simply abandoned.
        await finish(loop_task, timeout_s=30.0)
        await finish(startup, timeout_s=5.0, cancel_first=True)

    async def _reconcile_until_stopped(self) -> "asyncio.Task[None]":
        """Run the reconcile loop until stopped, restarting it should it ever end on its own."""
        stopping = asyncio.ensure_future(self.stop.wait())
        while True:
            loop_task = asyncio.create_task(self.reconciler.run(self.stop, self.lease.hold), name="reconcile")
            await asyncio.wait([stopping, loop_task], return_when=asyncio.FIRST_COMPLETED)
            if self.stop.is_set():
                return loop_task
            error = None if loop_task.cancelled() else loop_task.exception()
            log.error("reconcile loop ended unexpectedly; restarting it", error=repr(error))
            await wait_any(self.stop, timeout_s=1.0)

    async def _start_api(self) -> None:
        self._api_started = True
        try:
            await self.api.start()
        except (OSError, RuntimeError) as exc:
            raise ConfigError(f"cannot serve the management API: {exc}") from None

    async def _prepare_keys(self) -> None:
        try:
            await self.security.prepare_keys()
        except OSError as exc:
            raise ConfigError(f"cannot write the key file {self.settings.key_file}: {exc.strerror}") from None

    async def _prepare(self) -> None:
        await self.reconciler.adopt()
        await remove_unused_model_dirs(self.redis, self.settings.models_path)
        await self.launcher.prepare()

    async def _load_startup_models(self) -> None:
        # Safe to repeat: a startup model that is already registered is kept as it is.
        specs = startup_specs(self.settings.load_models, self.control.config.model_store)
        await load_startup_models(self.redis, self.control, specs, manager_pid=os.getpid())

    async def _retrying(self, action: Callable[[], Awaitable[None]], what: str) -> bool:
        """Run ``action`` until it gets through a Redis outage; False if stopped first."""
        backoff = Backoff(first_s=0.2, cap_s=5.0)
        while not self.stop.is_set():
            try:
                await action()
                return True
            except RedisError as exc:
                log.warning("redis unavailable; will retry", action=what, error=str(exc))
            await wait_any(self.stop, timeout_s=backoff.next_delay_s())
        return False

    async def _shutdown(self) -> None:
        if self._api_started:
            await _bounded("stop the management API", self.api.stop(API_GRACE_S), API_GRACE_S + 35.0)
        await self.reconciler.shutdown(self.settings.worker_stop_timeout_s)
        # Each remaining step is bounded: a stuck one must not keep the process from exiting.
        await _bounded("close the launcher", self.launcher.aclose())
        await _bounded("release the lease", self.lease.release())
        await _bounded("close redis", self.redis.aclose())
        log.info("manager stopped")


def models_dir_ok(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the models folder {path}: {exc.strerror}") from None


async def _bounded(step: str, action: Coroutine[object, object, None], timeout_s: float = 5.0) -> None:
    """Run one shutdown step in its own task; give up on it (cancel, do not wait) after ``timeout_s``."""
    task = asyncio.ensure_future(action)
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done:
        task.cancel()
        log.warning("shutdown step timed out", step=step, timeout_s=timeout_s)
    elif not task.cancelled() and (error := task.exception()) is not None:
        log.warning("shutdown step failed", step=step, error=repr(error))
