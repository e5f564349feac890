"""Registering a model version: fetch the archive, unpack it, read it, commit the version record.

The record is written last, in one transaction, under the model's lock: a crash before that leaves no
registered version, only folders that the next start removes (the private staging folder
``<models>/.staging-op-<id>`` and, once renamed, the unpacked folder, which the operation record names
so that a retry removes it first). A retry after the commit recognises it by the folder the record
points to and finishes without registering twice.

One :class:`Registrar` serves both callers: the management API's RegisterModel (a Celery task runs
:meth:`Registrar.run` on the operation's record) and the startup models (:meth:`Registrar.register`,
in the manager), so a version is registered the same way whichever asked. Everything it changes lives
in Redis; the reconcile loop turns it into workers.
"""

import asyncio
import dataclasses
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.registry import artifact as model_artifact
from sluice.registry import warmup
from sluice.registry.records import VersionRecord

from sluice_manager.models import archives
from sluice_manager.models.fetch import Download, LocalArchive, fetch
from sluice_manager.models.manifest import check_handler, read_archive
from sluice_manager.models.model_snapshot import merged_models_json, parse_model_snapshot
from sluice_manager.models.version_config import (
    ModelsJson,
    RegisterOptions,
    ServerDefaults,
    build_record,
    parse_models_json,
)
from sluice_manager.settings import ManagerSettings
from sluice_manager.stores import Stores
from sluice_manager.stores.operations import Operation

log = get_logger(__name__)

# Records how far a registration got on its operation (``note(model_dir=...)``); a retry reads it.
Note = Callable[..., Awaitable[None]]


@dataclass(frozen=True)
class RegistrationConfig:
    model_store: Path | None
    models_dir: Path
    limits: archives.ExtractionLimits = field(default_factory=archives.ExtractionLimits)
    defaults: ServerDefaults = field(default_factory=ServerDefaults)
    models_json: ModelsJson = field(default_factory=dict)
    lock_wait_s: float = 2.0
    # Fault injection for tests (T-18): sleep this long after unpacking, before the registry commit.
    pause_before_commit_s: float = 0.0


def registration_config(settings: ManagerSettings) -> RegistrationConfig:
    """The registration settings, for the manager and its task worker alike (ValueError: an invalid
    ``models`` or ``model_snapshot`` setting)."""
    return RegistrationConfig(
        model_store=settings.model_store.absolute() if settings.model_store else None,
        models_dir=settings.models_path,
        limits=archives.ExtractionLimits(
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
        ),
        models_json=merged_models_json(
            parse_model_snapshot(settings.model_snapshot).models_json, parse_models_json(settings.models)
        ),
        lock_wait_s=settings.task_lock_wait_s,
        pause_before_commit_s=settings.debug_pause_before_commit_s,
    )


def describe_archive(
    options: RegisterOptions,
    model_dir: Path,
    config: RegistrationConfig,
    now_unix_ms: int,
) -> VersionRecord:
    """The version record of the archive unpacked in ``model_dir``, with its artifact digest
    (blocking: run it in a thread)."""
    archive = archives.printable(options.url or options.model_name or "")
    contents = read_archive(model_dir, archive)
    handler = options.handler or contents.manifest.model.handler or config.defaults.default_service_handler
    if not handler:
        raise archives.ArchiveError(archive, "the manifest names no handler")
    check_handler(handler, model_dir, archive)
    record = build_record(
        options, contents, config.models_json, config.defaults,
        model_dir=str(model_dir), handler=handler, now_unix_ms=now_unix_ms,
    )  # fmt: skip
    if record.warmup_requests:
        try:
            warmup.read_requests(model_dir, record.warmup_requests)
        except warmup.WarmupFileError as exc:
            raise archives.ArchiveError(archive, f"model-config.yaml: {exc}") from None
    # Workers that do not see this folder fetch it by this digest (sluice.registry.artifact).
    return dataclasses.replace(record, artifact_sha256=model_artifact.digest(model_dir))


def already_registered(record: VersionRecord) -> SluiceError:
    return SluiceError(
        ErrorCode.CONFLICT,
        f"Model version {record.version} is already registered for model {record.model_name}",
    )


def is_default(options: RegisterOptions, record: VersionRecord, models_json: ModelsJson) -> bool:
    per_version = models_json.get(record.model_name, {}).get(record.version, {})
    return options.make_default or per_version.get("defaultVersion") is True


async def commit(
    stores: Stores,
    options: RegisterOptions,
    record: VersionRecord,
    models_json: ModelsJson,
    *,
    lock_wait_s: float,
) -> VersionRecord | None:
    """Write ``record`` under the model's lock (None). A version already registered is CONFLICT, except
    at startup, where it is kept as it is and returned (a restarted manager adopts it)."""
    async with stores.locks.hold(record.model_name, wait_s=lock_wait_s):
        existing = await stores.registry.get(record.model_name, record.version)
        if existing is not None:
            if not options.at_startup:
                raise already_registered(record)
            return existing
        await stores.registry.add(record, make_default=is_default(options, record, models_json))
    return None


def prepared_folder(models_dir: Path, source_dir: str) -> LocalArchive:
    """A folder the manager prepared for registration (RegisterOptions.source_dir), which must lie in
    its models folder."""
    real_root, real_path = os.path.realpath(models_dir), os.path.realpath(source_dir)
    if real_path == real_root or not archives.is_within(real_root, real_path) or not os.path.isdir(real_path):
        raise SluiceError(ErrorCode.INTERNAL, "A prepared model folder is missing")
    return LocalArchive(Path(real_path), archives.ArchiveKind.FOLDER)


async def _untracked(**_: object) -> None:
    """No operation record to keep up to date (the startup models)."""


class Registrar:
    def __init__(
        self,
        stores: Stores,
        config: RegistrationConfig,
        *,
        download: Download | None,
        wake: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``download``: None registers from the model store only. ``wake``: called once a new version
        is committed (the manager's reconcile loop; a task worker has none to wake)."""
        self.stores = stores
        self.config = config
        self.download = download
        self.wake = wake
        self.clock = clock

    async def register(self, options: RegisterOptions) -> VersionRecord:
        """Register ``options.url`` in this process, without an operation record (the startup models).
        At startup a version that is already registered is kept as it is and returned."""
        staging = self.config.models_dir / f"{archives.STAGING_PREFIX}{uuid.uuid4().hex}"
        return await self._register(options, staging, _untracked)

    async def run(self, op: Operation) -> tuple[Operation, VersionRecord]:
        """Register the operation's archive; returns the operation (with its version) and the record."""
        committed = await self._committed_earlier(op)
        if committed is not None:
            return op, committed
        latest = op

        async def note(**changes: object) -> None:
            nonlocal latest
            latest = await self.stores.operations.update(latest, **changes)

        staging = self.config.models_dir / f"{archives.STAGING_PREFIX}op-{op.op_id}"
        record = await self._register(RegisterOptions(**op.params), staging, note)
        return latest, record

    async def _register(self, options: RegisterOptions, staging: Path, note: Note) -> VersionRecord:
        await asyncio.to_thread(shutil.rmtree, staging, True)
        model_dir = await self._unpack(options, staging)
        try:
            await note(model_dir=str(model_dir))
            now_ms = int(self.clock() * 1000)
            record = await asyncio.to_thread(describe_archive, options, model_dir, self.config, now_ms)
            await note(model_name=record.model_name, version=record.version, min_workers=record.min_workers)
            if self.config.pause_before_commit_s > 0:
                log.warning("pausing before the registry commit (fault injection)", model=record.model_name,
                            version=record.version)  # fmt: skip
                await asyncio.sleep(self.config.pause_before_commit_s)
            kept = await commit(
                self.stores, options, record, self.config.models_json, lock_wait_s=self.config.lock_wait_s
            )
        except BaseException:
            archives.remove_model_dir(self.config.models_dir, model_dir)
            raise
        if kept is not None:
            archives.remove_model_dir(self.config.models_dir, model_dir)
            log.info("startup model already registered; keeping it", model=record.model_name,
                     version=record.version)  # fmt: skip
            return kept
        log.info("model registered", model=record.model_name, version=record.version, url=options.url,
                 min_workers=record.min_workers, max_workers=record.max_workers)  # fmt: skip
        self.wake()
        return record

    async def _committed_earlier(self, op: Operation) -> VersionRecord | None:
        """A retried operation: the version an earlier attempt committed, or None (and that attempt's
        unpacked folder is removed)."""
        if not op.model_dir:
            return None
        if op.model_name and op.version:
            existing = await self.stores.registry.get(op.model_name, op.version)
            if existing is not None and existing.model_dir == op.model_dir:
                return existing
        archives.remove_model_dir(self.config.models_dir, Path(op.model_dir))
        return None

    async def _unpack(self, options: RegisterOptions, staging: Path) -> Path:
        """Fetch and unpack into ``staging`` (private), then move the result into the models folder."""
        await asyncio.to_thread(staging.mkdir, parents=True, exist_ok=True)
        try:
            if options.source_dir:
                local = prepared_folder(self.config.models_dir, options.source_dir)
            else:
                local = await fetch(
                    options.url, model_store=self.config.model_store, work_dir=staging / "download",
                    downloader=self.download,
                )  # fmt: skip
            try:
                unpacked = await asyncio.to_thread(
                    archives.unpack, local.path, local.kind, staging, self.config.limits
                )
            finally:
                local.discard()
            final = self.config.models_dir / unpacked.name
            os.rename(unpacked, final)
            return final
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)
