"""The manager process, wired: Redis, lease, launcher, reconcile loop, management API (gRPC, REST and
the Celery task worker), startup models, shutdown.

The management API is served by the manager holding the lease. SIGTERM / SIGINT: close the management
ports (in-flight calls get ``api_grace_s``), stop reconciling, SIGTERM the workers (they drain), wait
up to ``worker_stop_timeout_s``, SIGKILL stragglers, stop the task worker, release the lease, exit 0.
"""

import asyncio
import dataclasses
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sluice.lifecycle.backoff import Backoff
from sluice.log import get_logger
from sluice.redis.client import connect
from sluice.redis.url import redacted
from sluice.tracing import start as start_tracing
from sluice.tracing import traced_calls, traced_requests

from sluice_manager.api.management_api import ApiSeams, ManagementApi
from sluice_manager.api.security import ManagerSecurity, manager_security, warn_exposure
from sluice_manager.models.artifact_server import ArtifactServer
from sluice_manager.models.load_models import startup_specs
from sluice_manager.models.model_snapshot import parse_model_snapshot
from sluice_manager.models.registration import Registrar, RegistrationConfig, registration_config
from sluice_manager.models.startup import load_startup_models, remove_unused_model_dirs
from sluice_manager.settings import ManagerSettings
from sluice_manager.stores import Stores
from sluice_manager.supervision.cluster import cluster_id
from sluice_manager.supervision.launchers.base import ContainerLimits, Launcher, LaunchRecord, Usage
from sluice_manager.supervision.launchers.registry import LauncherContext, build_launcher
from sluice_manager.supervision.lease import ManagerLease
from sluice_manager.supervision.policy import Timing
from sluice_manager.supervision.reconciler import Reconciler, ReconcilerConfig
from sluice_manager.waiting import finish, wait_any

log = get_logger(__name__)


# In-flight management calls get this long to finish after SIGTERM.
API_GRACE_S = 5.0


class ConfigError(Exception):
    """A setting that makes starting pointless; reported as one line, without a traceback."""


def checked_registration_config(settings: ManagerSettings) -> RegistrationConfig:
    try:
        return registration_config(settings)
    except ValueError as exc:
        raise ConfigError(f"invalid `models` or `model_snapshot` setting: {exc}") from None


def reconciler_config(settings: ManagerSettings) -> ReconcilerConfig:
    return ReconcilerConfig(
        timing=Timing(settings.heartbeat_grace_s, settings.worker_stop_timeout_s),
        reconcile_interval_s=settings.reconcile_interval_s,
        default_limits=ContainerLimits(cpus=settings.worker_cpus, memory_bytes=settings.worker_memory_bytes),
        worker_slots=settings.worker_slots,
    )


class Manager:
    def __init__(
        self, settings: ManagerSettings, environ: Mapping[str, str], *, api_seams: ApiSeams | None = None
    ) -> None:
        self.settings = settings
        self.environ = environ
        self.host = socket.gethostname()
        self.stop = asyncio.Event()
        self.redis: aioredis.Redis = connect(settings.redis_url)
        # Built once Redis answers (the docker launcher labels containers with the cluster id kept
        # there); until then a wake-up has nothing to wake.
        self.launcher: Launcher | None = None
        self.reconciler: Reconciler | None = None
        self._exits: asyncio.Task[None] | None = None
        self.stores = Stores.on(self.redis)
        # The startup models come from the model store only (the management API's tasks download URLs).
        self.registrar = Registrar(
            self.stores, checked_registration_config(settings), download=None, wake=self.wake
        )
        self.lease = ManagerLease(self.redis, host=self.host, pid=os.getpid(), ttl_s=settings.lease_ttl_s)
        # Tests that pass their own seams get no token authorization (and no key file).
        self.security = ManagerSecurity() if api_seams is not None else manager_security(settings, self.redis)
        # Traces of the management calls when the OTEL_* variables ask for them (outermost: refused
        # calls are traced too).
        self.tracing = start_tracing("manager", environ)
        seams = api_seams or self.security.seams
        seams = dataclasses.replace(
            seams,
            grpc_interceptors=[*traced_calls(self.tracing), *seams.grpc_interceptors],
            rest_middlewares=[*traced_requests(self.tracing), *seams.rest_middlewares],
        )
        self.api = ManagementApi(
            settings,
            self.redis,
            host=self.host,
            wake=self.wake,
            environ=environ,
            seams=seams,
            measure_usage=self._usage,
        )
        self.artifacts = ArtifactServer(self.redis, settings.artifact_address, settings.artifact_url)
        self._api_started = False

    def wake(self) -> None:
        if self.reconciler is not None:
            self.reconciler.wake()

    async def _usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        return {} if self.launcher is None else await self.launcher.usage(records)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        log.info(
            "manager starting",
            launcher=self.settings.launcher,
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
        if not await self._retrying(self._build_launcher, "connect the launcher"):
            return
        if not await self._retrying(self._prepare, "adopt workers"):
            return
        if not await self._retrying(self._prepare_keys, "prepare token keys"):
            return
        await self._start_api()
        startup = asyncio.create_task(self._retrying(self._load_startup_models, "load startup models"))
        assert self.reconciler is not None
        loop_task = await self._reconcile_until_stopped(self.reconciler)
        log.info("manager stopping")
        # The loop sees `stop` and ends after its current pass; registration is simply abandoned.
        await finish(loop_task, timeout_s=30.0)
        await finish(startup, timeout_s=5.0, cancel_first=True)

    async def _reconcile_until_stopped(self, reconciler: Reconciler) -> "asyncio.Task[None]":
        """Run the reconcile loop until stopped, restarting it should it ever end on its own."""
        stopping = asyncio.ensure_future(self.stop.wait())
        while True:
            loop_task = asyncio.create_task(reconciler.run(self.stop, self.lease.hold), name="reconcile")
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
        try:
            await self.artifacts.start()
        except OSError as exc:
            raise ConfigError(
                f"cannot serve model artifacts on {self.settings.artifact_address}: {exc}"
            ) from None

    async def _prepare_keys(self) -> None:
        try:
            await self.security.prepare_keys()
        except OSError as exc:
            raise ConfigError(f"cannot write the key file {self.settings.key_file}: {exc.strerror}") from None

    async def _build_launcher(self) -> None:
        if self.launcher is not None:
            return
        context = LauncherContext(
            settings=self.settings,
            environ=self.environ,
            host=self.host,
            cluster_id=await cluster_id(self.redis, self.settings.cluster_id),
        )
        try:
            launcher = await build_launcher(context)
            await launcher.prepare()
        except OSError as exc:
            raise ConfigError(f"cannot use the {self.settings.launcher} launcher: {exc}") from None
        self.launcher = launcher
        self.reconciler = Reconciler(self.stores.workers, launcher, reconciler_config(self.settings))
        # Exits are handled until the end of shutdown, which stops (and so sees the exit of) workers.
        self._exits = asyncio.create_task(self.reconciler.follow_exits(), name="worker-exits")

    async def _prepare(self) -> None:
        assert self.reconciler is not None
        await self.reconciler.adopt()
        await remove_unused_model_dirs(self.redis, self.settings.models_path)

    async def _load_startup_models(self) -> None:
        # Safe to repeat: a startup model that is already registered is kept as it is.
        specs = startup_specs(self.settings.load_models, self.registrar.config.model_store)
        snapshot = parse_model_snapshot(self.settings.model_snapshot)
        if not self.settings.load_models.strip() and snapshot.specs:
            specs = snapshot.specs
        await load_startup_models(
            self.redis,
            self.registrar,
            specs,
            manager_pid=os.getpid(),
            defaults=snapshot.defaults,
            set_default=self.stores.registry.set_default,
        )

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
            await _bounded("stop the artifact endpoint", self.artifacts.stop(API_GRACE_S), API_GRACE_S + 5.0)
        if self.reconciler is not None:
            await self.reconciler.shutdown(self.settings.worker_stop_timeout_s)
        if self._exits is not None:
            await finish(self._exits, timeout_s=5.0, cancel_first=True)
        # Each remaining step is bounded: a stuck one must not keep the process from exiting.
        if self.launcher is not None:
            await _bounded("close the launcher", self.launcher.aclose())
        await _bounded("release the lease", self.lease.release())
        await _bounded("close redis", self.redis.aclose())
        if self.tracing is not None:
            await _bounded("export the last spans", asyncio.to_thread(self.tracing.shutdown))
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
