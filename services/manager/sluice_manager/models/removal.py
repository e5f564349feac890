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
from typing import Any

import redis.asyncio as aioredis
from sluice import keys, registry
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.records import VersionState, event

from sluice_manager.models import archives
from sluice_manager.models.queued_jobs import fail_queued_jobs
from sluice_manager.operations.redis_lock import model_lock
from sluice_manager.supervision.worker_state import WorkerStateStore

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
    def __init__(self, redis: "aioredis.Redis", config: RemovalConfig) -> None:
        self.redis = redis
        self.config = config
        self.workers = WorkerStateStore(redis)

    async def run(self, model: str, version: str | None) -> str:
        """Unregister ``model``/``version`` (the default when None); returns the version removed."""
        async with model_lock(self.redis, model, wait_s=self.config.lock_wait_s):
            default, versions = await registry.model_versions(self.redis, model)
            chosen = registry.choose_version(model, version or "", default, versions)
            if chosen == default and len(versions) > 1:
                raise SluiceError(
                    ErrorCode.FAILED_PRECONDITION, f"Cannot remove default version for model {model}"
                )
            record = await registry.get_version(self.redis, model, chosen)
            await self.redis.hset(keys.version_config(model, chosen), "state", VersionState.REMOVING.value)
            await self.redis.publish(keys.EVENTS_CHANNEL, event("unregistering", model, chosen))
            drained = await self._wait_for_no_workers(model, chosen)
            answered = await fail_queued_jobs(self.redis, model, chosen, unregistered_error(model, chosen))
            await self._delete_keys(model, chosen, last=versions == {chosen})
            if record is not None:
                archives.remove_model_dir(self.config.models_dir, Path(record.model_dir))
            await self.redis.publish(keys.EVENTS_CHANNEL, event("unregistered", model, chosen))
        log.info("model unregistered", model=model, version=chosen, queued_jobs_failed=answered,
                 workers_drained=drained)  # fmt: skip
        if not drained:
            raise SluiceError(ErrorCode.DEADLINE_EXCEEDED, f"Timed out while cleaning resources: {model}")
        return chosen

    async def _wait_for_no_workers(self, model: str, version: str) -> bool:
        deadline = time.monotonic() + self.config.unregister_timeout_s
        while True:
            if await self._has_no_workers(model, version):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_INTERVAL_S)

    async def _has_no_workers(self, model: str, version: str) -> bool:
        launched = await self.workers.launched()
        if any((r.model_name, r.version) == (model, version) for r in launched.values()):
            return False
        return not await self.redis.hlen(keys.workers(model, version))

    async def _delete_keys(self, model: str, version: str, *, last: bool) -> None:
        found: list[Any] = [
            key async for key in self.redis.scan_iter(match=keys.version_keys_pattern(model, version))
        ]
        # Not one transaction: the keys live in different Cluster slots. Each step is idempotent.
        async with self.redis.pipeline(transaction=False) as pipe:
            if found:
                pipe.delete(*found)
            pipe.hdel(keys.RESTARTS, f"{model}:{version}")
            if last:
                pipe.delete(keys.model(model))
                pipe.zrem(keys.MODELS, model)
            else:
                pipe.hdel(keys.model(model), f"{registry.VERSION_FIELD_PREFIX}{version}")
            await pipe.execute()
