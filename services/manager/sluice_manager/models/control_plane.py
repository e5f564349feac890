"""The manager's in-process domain operation: registering the startup models (``load_models``).

The management APIs (gRPC 7071 and REST 8081) go through :mod:`sluice_manager.api.management`, whose long
operations run as Celery tasks; both paths share :mod:`sluice_manager.models.registration` (archive reading,
precedence rules, the duplicate check and the commit under the model's lock), so a version is
registered the same way whichever path asked. Everything they change lives in Redis; the reconcile
loop turns it into workers.
"""

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.records import VersionRecord

from sluice_manager.models import archives
from sluice_manager.models.registration import RegistrationConfig, commit, describe_archive
from sluice_manager.models.version_config import ModelsJson, RegisterOptions, ServerDefaults
from sluice_manager.stores import Stores

log = get_logger(__name__)


@dataclass(frozen=True)
class ControlPlaneConfig:
    model_store: Path | None
    models_dir: Path
    limits: archives.ExtractionLimits = field(default_factory=archives.ExtractionLimits)
    defaults: ServerDefaults = field(default_factory=ServerDefaults)
    models_json: ModelsJson = field(default_factory=dict)
    lock_wait_s: float = 30.0

    def registration(self) -> RegistrationConfig:
        return RegistrationConfig(
            model_store=self.model_store,
            models_dir=self.models_dir,
            limits=self.limits,
            defaults=self.defaults,
            models_json=self.models_json,
            lock_wait_s=self.lock_wait_s,
        )


class ControlPlane:
    def __init__(
        self,
        stores: Stores,
        config: ControlPlaneConfig,
        *,
        wake: Callable[[], None],
        host: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stores = stores
        self.config = config
        self._wake = wake
        self._host = host
        self._clock = clock

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
            now_ms = int(self._clock() * 1000)
            record = await asyncio.to_thread(
                describe_archive, options, model_dir, self.config.registration(), now_ms
            )
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
        self._wake()
        return record
