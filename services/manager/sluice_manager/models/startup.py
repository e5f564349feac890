"""Startup: tidy the models folder, register the ``load_models`` archives, report the outcome.

The report (:class:`sluice.registry.records.StartupReport`) is what ``sluice start`` waits on: which versions
were loaded at startup and how many workers each must have READY, plus the archives that failed.
A failed archive is logged and skipped, as TorchServe does; the others still load.
"""

import asyncio
import dataclasses
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import redis.asyncio as aioredis
from sluice.errors import SluiceError
from sluice.log import get_logger
from sluice.redis import keys
from sluice.registry.records import StartupModel, StartupReport

from sluice_manager.models.archives import STAGING_PREFIX
from sluice_manager.models.load_models import StartupModelSpec
from sluice_manager.models.registration import Registrar
from sluice_manager.models.version_config import RegisterOptions
from sluice_manager.supervision.worker_state import WorkerStateStore

log = get_logger(__name__)

# Names `archives.unpack` gives the folders it creates (uuid4 hex).
_UNPACKED = re.compile(r"[0-9a-f]{32}")


async def load_startup_models(
    redis: "aioredis.Redis",
    registrar: Registrar,
    specs: list[StartupModelSpec],
    *,
    manager_pid: int,
    defaults: Mapping[str, str] | None = None,
    set_default: Callable[[str, str], Awaitable[None]] | None = None,
) -> StartupReport:
    """Register ``specs``; then make each ``defaults`` version (model -> version, a model snapshot's
    ``defaultVersion``) that loaded its model's default, before the report says done."""
    report = StartupReport(manager_pid=manager_pid, started_unix_ms=int(time.time() * 1000))
    await redis.set(keys.STARTUP_REPORT, report.to_json())
    models: list[StartupModel] = []
    errors: list[str] = []
    for spec in specs:
        try:
            record = await registrar.register(
                RegisterOptions(url=spec.url, model_name=spec.model_name, at_startup=True)
            )
        except SluiceError as err:
            log.error("startup model not loaded", url=spec.url, error=err.message)
            errors.append(f"{spec.url}: {err.message}")
            continue
        models.append(StartupModel(model_name=record.model_name, version=record.version,
                                   min_workers=record.min_workers))  # fmt: skip
    loaded = {(model.model_name, model.version) for model in models}
    for model, version in (defaults or {}).items():
        if set_default is not None and (model, version) in loaded:
            await set_default(model, version)
    report = dataclasses.replace(report, done=True, models=models, errors=errors)
    await redis.set(keys.STARTUP_REPORT, report.to_json())
    log.info("startup models registered", loaded=len(models), failed=len(errors))
    return report


async def remove_unused_model_dirs(redis: "aioredis.Redis", models_dir: Path) -> int:
    """Delete unpacked folders no registered version uses (left by unregister-less shutdowns or a
    crash between unpacking and registering) and staging folders of interrupted unpacks."""
    versions = await WorkerStateStore(redis).registered_versions()
    removed = await asyncio.to_thread(
        _remove_unused, models_dir, [v.record.model_dir for v in versions.values()]
    )
    if removed:
        log.info("removed unused model folders", count=removed)
    return removed


def _remove_unused(models_dir: Path, model_dirs: list[str]) -> int:
    if not models_dir.is_dir():
        return 0
    in_use = {os.path.realpath(path) for path in model_dirs}
    removed = 0
    with os.scandir(models_dir) as entries:
        for entry in entries:
            path = os.path.realpath(entry.path)
            if path in in_use or entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.name.startswith(STAGING_PREFIX) or _UNPACKED.fullmatch(entry.name):
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
    return removed
