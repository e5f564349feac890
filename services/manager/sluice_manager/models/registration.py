"""Registering a model version: fetch the archive, unpack it, read it, commit the version record.

The record is written last, in one transaction, under the model's lock: a crash before that leaves no
registered version, only folders that the next start removes (the private staging folder
``<models>/.staging-op-<id>`` and, once renamed, the unpacked folder, which the operation record names
so that a retry removes it first). A retry after the commit recognises it by the folder the record
points to and finishes without registering twice.
"""

import asyncio
import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sluice import model_artifact
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.records import VersionRecord

from sluice_manager.models import archives
from sluice_manager.models.fetch import Download, fetch
from sluice_manager.models.manifest import check_handler, read_archive
from sluice_manager.models.version_config import ModelsJson, RegisterOptions, ServerDefaults, build_record
from sluice_manager.operations.store import Operation, OperationStore
from sluice_manager.stores import Stores

log = get_logger(__name__)


@dataclass(frozen=True)
class RegistrationConfig:
    model_store: Path | None
    models_dir: Path
    limits: archives.ExtractionLimits
    defaults: ServerDefaults
    models_json: ModelsJson
    lock_wait_s: float = 2.0
    # Fault injection for tests (T-18): sleep this long after unpacking, before the registry commit.
    pause_before_commit_s: float = 0.0


def describe_archive(
    options: RegisterOptions,
    model_dir: Path,
    config: RegistrationConfig,
    now_unix_ms: int,
) -> VersionRecord:
    """The version record of the archive unpacked in ``model_dir``, with its artifact digest
    (blocking: run it in a thread)."""
    archive = archives.printable(options.url)
    contents = read_archive(model_dir, archive)
    handler = options.handler or contents.manifest.model.handler or config.defaults.default_service_handler
    if not handler:
        raise archives.ArchiveError(archive, "the manifest names no handler")
    check_handler(handler, model_dir, archive)
    record = build_record(
        options, contents, config.models_json, config.defaults,
        model_dir=str(model_dir), handler=handler, now_unix_ms=now_unix_ms,
    )  # fmt: skip
    # Workers that do not see this folder fetch it by this digest (sluice.model_artifact).
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


class Registrar:
    def __init__(
        self,
        stores: Stores,
        config: RegistrationConfig,
        ops: OperationStore,
        *,
        download: Download | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stores = stores
        self.config = config
        self.ops = ops
        self.download = download
        self.clock = clock

    async def run(self, op: Operation) -> tuple[Operation, VersionRecord]:
        """Register the operation's archive; returns the operation (with its version) and the record."""
        options = RegisterOptions(**op.params)
        committed = await self._committed_earlier(op)
        if committed is not None:
            return op, committed
        staging = self.config.models_dir / f"{archives.STAGING_PREFIX}op-{op.op_id}"
        await asyncio.to_thread(shutil.rmtree, staging, True)
        model_dir = await self._unpack(options, staging)
        try:
            op = await self.ops.update(op, model_dir=str(model_dir))
            now_ms = int(self.clock() * 1000)
            record = await asyncio.to_thread(describe_archive, options, model_dir, self.config, now_ms)
            op = await self.ops.update(
                op, model_name=record.model_name, version=record.version, min_workers=record.min_workers
            )
            if self.config.pause_before_commit_s > 0:
                log.warning("pausing before the registry commit (fault injection)", op=op.op_id)
                await asyncio.sleep(self.config.pause_before_commit_s)
            await commit(
                self.stores, options, record, self.config.models_json, lock_wait_s=self.config.lock_wait_s
            )
        except BaseException:
            archives.remove_model_dir(self.config.models_dir, model_dir)
            raise
        log.info("model registered", model=record.model_name, version=record.version, url=options.url,
                 min_workers=record.min_workers, max_workers=record.max_workers)  # fmt: skip
        return op, record

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
