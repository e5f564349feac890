"""Unregistering a model version, in an order that never routes a request to a half-removed version:

1. under the model's lock: refuse the default version while others remain (TorchServe's rule);
2. mark the version ``removing`` and publish it: gateways stop routing to it (their enqueue script
   refuses a version that is not active) and the reconciler stops its workers, which drain;
3. wait until its workers are gone (bounded by ``unregister_model_timeout``);
4. answer the jobs still queued with a not-found error, delete every key of the version (heartbeats
   and cancel flags included) and its unpacked folder, and publish ``unregistered``.

Each step is safe to repeat, so a retried operation finishes what a crashed one started.
"""

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.registry.reader import choose_version

from sluice_manager.models import archives
from sluice_manager.stores import Stores

log = get_logger(__name__)

_POLL_INTERVAL_S = 0.1


@dataclass(frozen=True)
class RemovalConfig:
    models_dir: Path
    unregister_timeout_s: float = 120.0
    lock_wait_s: float = 2.0


def unregistered_error(model: str, version: str) -> SluiceError:
    """What a job still queued for a removed version is answered."""
    return SluiceError(ErrorCode.MODEL_NOT_FOUND, f'Model "{model}" version {version} was unregistered')


class Remover:
    def __init__(self, stores: Stores, config: RemovalConfig) -> None:
        self.stores = stores
        self.config = config

    async def run(self, model: str, version: str | None) -> str:
        """Unregister ``model``/``version`` (the default when None); returns the version removed."""
        registry = self.stores.registry
        async with self.stores.locks.hold(model, wait_s=self.config.lock_wait_s):
            default, versions = await registry.versions(model)
            chosen = choose_version(model, version or "", default, versions)
            if chosen == default and len(versions) > 1:
                raise SluiceError(
                    ErrorCode.FAILED_PRECONDITION, f"Cannot remove default version for model {model}"
                )
            record = await registry.get(model, chosen)
            weights = (await registry.routing(model)).weights
            if chosen in weights:
                # Its share of the calls that name no version goes to the others (or the default).
                remaining = {v: w for v, w in weights.items() if v != chosen}
                await registry.set_weights(model, remaining if any(remaining.values()) else {})
            await registry.mark_removing(model, chosen)
            drained = await self._wait_for_no_workers(model, chosen)
            answered = await self.stores.jobs.fail_all(model, chosen, unregistered_error(model, chosen))
            await self.stores.workers.clear_streak(model, chosen)
            await self.stores.workers.clear_scaling_state(model, chosen)
            await registry.remove(model, chosen, last=versions == {chosen})
            if record is not None:
                archives.remove_model_dir(self.config.models_dir, Path(record.model_dir))
        log.info("model unregistered", model=model, version=chosen, queued_jobs_failed=answered,
                 workers_drained=drained)  # fmt: skip
        if not drained:
            raise SluiceError(ErrorCode.DEADLINE_EXCEEDED, f"Timed out while cleaning resources: {model}")
        return chosen

    async def _wait_for_no_workers(self, model: str, version: str) -> bool:
        deadline = time.monotonic() + self.config.unregister_timeout_s
        while True:
            if not await self.stores.workers.any_worker(model, version):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_INTERVAL_S)
