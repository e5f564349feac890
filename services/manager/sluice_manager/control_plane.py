"""The manager's domain operations: register, unregister, scale and describe model versions.

The management APIs (gRPC 7071 and REST 8081) are thin converters onto these; startup loading uses
``register`` too. Everything they change lives in Redis; the reconcile loop turns it into workers.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis.asyncio as aioredis
from sluice import keys, registry
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.records import VersionRecord, VersionState, event

from sluice_manager import archives
from sluice_manager.launcher import LaunchRecord
from sluice_manager.manifest import check_handler, read_archive
from sluice_manager.version_config import ModelsJson, RegisterOptions, ServerDefaults, build_record
from sluice_manager.worker_state import WorkerStateStore

log = get_logger(__name__)

ALL_VERSIONS = "all"


@dataclass(frozen=True)
class ControlPlaneConfig:
    model_store: Path | None
    models_dir: Path
    limits: archives.ExtractionLimits = field(default_factory=archives.ExtractionLimits)
    defaults: ServerDefaults = field(default_factory=ServerDefaults)
    models_json: ModelsJson = field(default_factory=dict)
    unregister_timeout_s: float = 120.0


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    status: str
    pid: int | None
    host: str
    started_unix_ms: int
    memory_bytes: int | None = None
    gpu: bool = False


@dataclass(frozen=True)
class VersionDescription:
    record: VersionRecord
    is_default: bool
    workers: tuple[WorkerView, ...]
    pending_jobs: int


class ControlPlane:
    def __init__(
        self,
        redis: "aioredis.Redis",
        config: ControlPlaneConfig,
        *,
        wake: Callable[[], None],
        host: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.config = config
        self.store = WorkerStateStore(redis)
        self._wake = wake
        self._host = host
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, model: str) -> asyncio.Lock:
        return self._locks.setdefault(model, asyncio.Lock())

    async def register(self, options: RegisterOptions) -> VersionRecord:
        """Unpack an archive from the model store and register it as a model version. At startup a
        version that is already registered is kept as it is (a restarted manager adopts it)."""
        if self.config.model_store is None:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "No model store is configured (--model-store)")
        source, kind = archives.locate(self.config.model_store, options.url)
        model_dir = await asyncio.to_thread(
            archives.unpack, source, kind, self.config.models_dir, self.config.limits
        )
        try:
            record = await asyncio.to_thread(self._describe_archive, options, model_dir)
            async with self._lock(record.model_name):
                existing = await registry.get_version(self.redis, record.model_name, record.version)
                if existing is not None:
                    if not options.at_startup:
                        raise SluiceError(ErrorCode.CONFLICT, _already_registered(record))
                    archives.remove_model_dir(self.config.models_dir, model_dir)
                    log.info("startup model already registered; keeping it", model=record.model_name,
                             version=record.version)  # fmt: skip
                    return existing
                await registry.put_version(self.redis, record, make_default=self._is_default(options, record))
                await self.redis.publish(
                    keys.EVENTS_CHANNEL, event("registered", record.model_name, record.version)
                )
        except BaseException:
            archives.remove_model_dir(self.config.models_dir, model_dir)
            raise
        log.info("model registered", model=record.model_name, version=record.version, url=options.url,
                 min_workers=record.min_workers, max_workers=record.max_workers)  # fmt: skip
        self._wake()
        return record

    def _describe_archive(self, options: RegisterOptions, model_dir: Path) -> VersionRecord:
        archive = archives.printable(options.url)
        contents = read_archive(model_dir, archive)
        defaults = self.config.defaults
        handler = options.handler or contents.manifest.model.handler or defaults.default_service_handler
        if not handler:
            raise archives.ArchiveError(archive, "the manifest names no handler")
        check_handler(handler, model_dir, archive)
        return build_record(
            options,
            contents,
            self.config.models_json,
            defaults,
            model_dir=str(model_dir),
            handler=handler,
            now_unix_ms=int(self._clock() * 1000),
        )

    def _is_default(self, options: RegisterOptions, record: VersionRecord) -> bool:
        per_version = self.config.models_json.get(record.model_name, {}).get(record.version, {})
        return options.make_default or per_version.get("defaultVersion") is True

    async def unregister(self, model: str, version: str | None = None) -> None:
        """Stop a version's workers (bounded by ``unregister_model_timeout``), then delete its keys and
        its unpacked folder. The default version goes last: TorchServe refuses it while others remain."""
        async with self._lock(model):
            default, versions = await registry.model_versions(self.redis, model)
            chosen = registry.choose_version(model, version or "", default, versions)
            if chosen == default and len(versions) > 1:
                raise SluiceError(
                    ErrorCode.INVALID_ARGUMENT, f"Cannot remove default version for model {model}"
                )
            record = await registry.get_version(self.redis, model, chosen)
            await self.redis.hset(keys.version_config(model, chosen), "state", VersionState.REMOVING.value)
            await self.redis.publish(keys.EVENTS_CHANNEL, event("unregistering", model, chosen))
            self._wake()
            await self._wait(lambda: self._has_no_workers(model, chosen), self.config.unregister_timeout_s)
            await self._delete_version(model, chosen, last=len(versions) == 1)
            if record is not None:
                archives.remove_model_dir(self.config.models_dir, Path(record.model_dir))
            await self.redis.publish(keys.EVENTS_CHANNEL, event("unregistered", model, chosen))
        log.info("model unregistered", model=model, version=chosen)
        self._wake()

    async def _has_no_workers(self, model: str, version: str) -> bool:
        launched = await self.store.launched()
        mine = [r for r in launched.values() if (r.model_name, r.version) == (model, version)]
        return not mine and not await self.redis.hlen(keys.workers(model, version))

    async def _delete_version(self, model: str, version: str, *, last: bool) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(
                keys.version_config(model, version),
                keys.job_stream(model, version),
                keys.workers(model, version),
                keys.dead_letters(model, version),
                keys.batch_sizes(model, version),
            )
            pipe.hdel(keys.RESTARTS, f"{model}:{version}")
            if last:
                pipe.delete(keys.model(model))
                pipe.zrem(keys.MODELS, model)
            else:
                pipe.hdel(keys.model(model), f"{registry.VERSION_FIELD_PREFIX}{version}")
            await pipe.execute()

    async def scale(
        self,
        model: str,
        version: str | None,
        min_workers: int,
        max_workers: int | None = None,
        *,
        timeout_s: float = 0.0,
    ) -> VersionRecord:
        """Set a version's worker range; with ``timeout_s`` wait until that many workers are READY."""
        high = min_workers if max_workers is None else max_workers
        if min_workers < 0 or high < min_workers:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT, "Invalid worker numbers: need 0 <= min_worker <= max_worker"
            )
        async with self._lock(model):
            chosen = await registry.resolve_version(self.redis, model, version or "")
            record = await self._active_record(model, chosen)
            updated = record.model_copy(update={"min_workers": min_workers, "max_workers": high})
            await registry.put_version(self.redis, updated, make_default=False)
            await self.store.clear_streak(model, chosen)
            await self.redis.publish(keys.EVENTS_CHANNEL, event("scaled", model, chosen))
        log.info("model scaled", model=model, version=chosen, min_workers=min_workers, max_workers=high)
        self._wake()
        if timeout_s > 0 and not await self._wait(lambda: self._has_ready(model, chosen, updated), timeout_s):
            raise SluiceError(ErrorCode.INTERNAL, "Failed to start workers")
        return updated

    async def _active_record(self, model: str, version: str) -> VersionRecord:
        raw_state = await self.redis.hget(keys.version_config(model, version), "state")
        record = await registry.get_version(self.redis, model, version)
        if record is None or raw_state not in (VersionState.ACTIVE.value, VersionState.ACTIVE.value.encode()):
            raise SluiceError(
                ErrorCode.VERSION_NOT_FOUND, f"Model version: {version} does not exist for model: {model}"
            )
        return record

    async def _has_ready(self, model: str, version: str, record: VersionRecord) -> bool:
        ready = await registry.live_workers(self.redis, model, version)
        return record.min_workers <= len(ready) <= record.max_workers

    async def _wait(self, done: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if await done():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)

    async def describe(self, model: str, version: str | None = None) -> list[VersionDescription]:
        """One version (the default when none is given), or every version with ``"all"``."""
        default, versions = await registry.model_versions(self.redis, model)
        if version == ALL_VERSIONS:
            chosen = sorted(versions)
            if not chosen:
                raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
        else:
            chosen = [registry.choose_version(model, version or "", default, versions)]
        launched = await self.store.launched()
        found: list[VersionDescription] = []
        for name in chosen:
            record = await registry.get_version(self.redis, model, name)
            if record is not None:
                found.append(await self._describe_version(record, name == default, launched))
        return found

    async def _describe_version(
        self, record: VersionRecord, is_default: bool, launched: dict[str, LaunchRecord]
    ) -> VersionDescription:
        model, version = record.model_name, record.version
        announced = await self.store.announced(model, version)
        views: dict[str, WorkerView] = {}
        for launch in launched.values():
            if (launch.model_name, launch.version) == (model, version):
                views[launch.worker_id] = WorkerView(
                    launch.worker_id, "STARTING", launch.pid, launch.host, launch.started_unix_ms,
                    self._memory(launch.host, launch.pid),
                )  # fmt: skip
        for worker_id, seen in announced.items():
            worker = seen.record
            status = worker.status.value if seen.heartbeat else "UNRESPONSIVE"
            views[worker_id] = WorkerView(
                worker_id, status, worker.pid, worker.host, worker.started_unix_ms,
                self._memory(worker.host, worker.pid), worker.gpu,
            )  # fmt: skip
        pending = int(await self.redis.xlen(keys.job_stream(model, version)))
        return VersionDescription(record, is_default, tuple(views[k] for k in sorted(views)), pending)

    def _memory(self, host: str, pid: int | None) -> int | None:
        if host != self._host or pid is None:
            return None
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None


def _already_registered(record: VersionRecord) -> str:
    return f"Model version {record.version} is already registered for model {record.model_name}"
