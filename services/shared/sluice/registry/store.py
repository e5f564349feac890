"""The model registry's one writer: every change is written and announced on
:data:`sluice.redis.keys.EVENTS_CHANNEL` in one ``MULTI``/``EXEC``, so no reader (a gateway's cache, the
reconcile loop) can see a change whose event never comes, nor an event before its change. On a Redis
Cluster the keys of one change span slots: they are written in order, the event last
(:mod:`sluice.redis.writes`), so an event still never comes before its change, and a write cut short
is finished by the management call's retry (an operation runs again until it is done).

Reads are the free functions of :mod:`sluice.registry.reader` (gateways use them through their own Redis
client); this store offers them too, so the manager's domain code needs only the store. Callers
serialise read-check-write sequences of one model with the manager's per-model lock.
"""

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sluice.redis import keys
from sluice.redis.writes import ordered_writes
from sluice.registry import reader as registry
from sluice.registry import workflows
from sluice.registry.records import VersionRecord, VersionState, event
from sluice.registry.workflows import WorkflowRecord

if TYPE_CHECKING:
    import redis.asyncio as aioredis

STATE_FIELD = "state"
QUEUE_SIZE_FIELD = "job_queue_size"
# "1" when the version may run no worker and start one for a request (minWorkers 0, maxWorkers > 0):
# gateways then admit jobs while no worker runs (the enqueue scripts read it).
SCALE_FROM_ZERO_FIELD = "scale_from_zero"


def _scales_from_zero(record: VersionRecord) -> str:
    return "1" if record.min_workers == 0 and record.max_workers > 0 else "0"


class RegistryStore:
    def __init__(self, redis: "aioredis.Redis") -> None:
        self._redis = redis

    # Reads -----------------------------------------------------------------------------------------
    async def model_names(self) -> list[str]:
        raw: Sequence[Any] = await self._redis.zrange(keys.MODELS, 0, -1)
        return [_text(name) for name in raw]

    async def versions(self, model: str) -> tuple[str | None, set[str]]:
        """(default version, all versions) of ``model``; (None, set()) when it is not registered."""
        return await registry.model_versions(self._redis, model)

    async def resolve(self, model: str, requested: str) -> str:
        """The version a request for ``model``/``requested`` ("" = default) means, or the error."""
        return await registry.resolve_version(self._redis, model, requested)

    async def get(self, model: str, version: str) -> VersionRecord | None:
        return await registry.get_version(self._redis, model, version)

    async def default_records(self, models: Sequence[str]) -> dict[str, VersionRecord]:
        """Each model's default version's record (models without one are left out), in two round
        trips whatever the number of models."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for model in models:
                pipe.hget(keys.model(model), registry.DEFAULT_FIELD)
            defaults: list[Any] = await pipe.execute()
        named = [(model, _text(default)) for model, default in zip(models, defaults, strict=True) if default]
        async with self._redis.pipeline(transaction=False) as pipe:
            for model, default in named:
                pipe.hget(keys.version_config(model, default), registry.RECORD_FIELD)
            raw_records: list[Any] = await pipe.execute()
        return {
            model: VersionRecord.from_json(raw)
            for (model, _), raw in zip(named, raw_records, strict=True)
            if raw is not None
        }

    async def is_active(self, model: str, version: str) -> bool:
        state = await self._redis.hget(keys.version_config(model, version), STATE_FIELD)
        return state is not None and _text(state) == VersionState.ACTIVE.value

    async def get_active(self, model: str, version: str) -> VersionRecord | None:
        """The version's record while it is active (not being removed), else None."""
        raw_record, raw_state = await self._redis.hmget(
            keys.version_config(model, version), [registry.RECORD_FIELD, STATE_FIELD]
        )
        if raw_record is None or raw_state is None or _text(raw_state) != VersionState.ACTIVE.value:
            return None
        return VersionRecord.from_json(raw_record)

    async def workflow(self, name: str) -> WorkflowRecord | None:
        return await workflows.get_workflow(self._redis, name)

    async def workflow_names(self) -> list[str]:
        return await workflows.workflow_names(self._redis)

    # Writes, each with its event ---------------------------------------------------------------------
    async def add(self, record: VersionRecord, *, make_default: bool) -> None:
        """Register ``record`` as an active version (and the model's default if asked or if it has
        none); announces ``registered``."""
        model, version = record.model_name, record.version
        async with ordered_writes(self._redis) as pipe:
            pipe.hset(
                keys.version_config(model, version),
                mapping={
                    registry.RECORD_FIELD: record.to_json(),
                    STATE_FIELD: VersionState.ACTIVE.value,
                    QUEUE_SIZE_FIELD: record.job_queue_size,
                    SCALE_FROM_ZERO_FIELD: _scales_from_zero(record),
                },
            )
            registered_ms = record.registered_unix_ms or int(time.time() * 1000)
            pipe.hset(keys.model(model), f"{registry.VERSION_FIELD_PREFIX}{version}", registered_ms)
            if make_default:
                pipe.hset(keys.model(model), registry.DEFAULT_FIELD, version)
            else:
                pipe.hsetnx(keys.model(model), registry.DEFAULT_FIELD, version)
            pipe.zadd(keys.MODELS, {model: 0})
            pipe.publish(keys.EVENTS_CHANNEL, event("registered", model, version))
            await pipe.execute()

    async def update(self, record: VersionRecord, kind: str) -> None:
        """Replace an existing version's record (new worker counts, say); announces ``kind``."""
        model, version = record.model_name, record.version
        async with ordered_writes(self._redis) as pipe:
            pipe.hset(
                keys.version_config(model, version),
                mapping={
                    registry.RECORD_FIELD: record.to_json(),
                    SCALE_FROM_ZERO_FIELD: _scales_from_zero(record),
                },
            )
            pipe.publish(keys.EVENTS_CHANNEL, event(kind, model, version))
            await pipe.execute()

    async def set_default(self, model: str, version: str) -> None:
        async with ordered_writes(self._redis) as pipe:
            pipe.hset(keys.model(model), registry.DEFAULT_FIELD, version)
            pipe.publish(keys.EVENTS_CHANNEL, event("default", model, version))
            await pipe.execute()

    async def set_weights(self, model: str, weights: dict[str, int]) -> None:
        """The model's traffic weights (:func:`sluice.registry.reader.check_weights`); empty: none,
        calls that name no version go to the default again. Announced as ``weights``."""
        async with ordered_writes(self._redis) as pipe:
            if weights:
                pipe.hset(keys.model(model), registry.WEIGHTS_FIELD, json.dumps(weights, sort_keys=True))
            else:
                pipe.hdel(keys.model(model), registry.WEIGHTS_FIELD)
            pipe.publish(keys.EVENTS_CHANNEL, event("weights", model, ""))
            await pipe.execute()

    async def routing(self, model: str) -> registry.ModelRouting:
        return await registry.model_routing(self._redis, model)

    async def add_workflow(self, record: WorkflowRecord) -> bool:
        """Register a workflow (its members are registered already); False when one of that name is.
        Announces ``workflow``."""
        async with ordered_writes(self._redis) as pipe:
            pipe.hsetnx(keys.WORKFLOWS, record.name, record.to_json())
            pipe.publish(keys.EVENTS_CHANNEL, event("workflow", record.name))
            added, _receivers = await pipe.execute()
        return bool(added)

    async def remove_workflow(self, name: str) -> bool:
        """Forget a workflow (its members stay until they are unregistered); False when there was
        none. Announces ``workflow``."""
        async with ordered_writes(self._redis) as pipe:
            pipe.hdel(keys.WORKFLOWS, name)
            pipe.publish(keys.EVENTS_CHANNEL, event("workflow", name))
            removed, _receivers = await pipe.execute()
        return bool(removed)

    async def mark_removing(self, model: str, version: str) -> None:
        """Gateways stop routing to the version (their enqueue refuses one that is not active) and
        the reconciler stops its workers; announces ``unregistering``."""
        async with ordered_writes(self._redis) as pipe:
            pipe.hset(keys.version_config(model, version), STATE_FIELD, VersionState.REMOVING.value)
            pipe.publish(keys.EVENTS_CHANNEL, event("unregistering", model, version))
            await pipe.execute()

    async def remove(self, model: str, version: str, *, last: bool) -> None:
        """Delete every key of the version (its records, streams, heartbeats, flags) and its place in
        the model (the whole model when ``last``); announces ``unregistered``.

        The version's own keys share a Cluster slot; the model's keys do not, so the two groups are
        two transactions, each idempotent: a retried removal finishes what a crashed one began."""
        found: list[Any] = [
            key async for key in self._redis.scan_iter(match=keys.version_keys_pattern(model, version))
        ]
        if found:
            await self._redis.delete(*found)
        async with ordered_writes(self._redis) as pipe:
            if last:
                pipe.delete(keys.model(model))
                pipe.zrem(keys.MODELS, model)
            else:
                pipe.hdel(keys.model(model), f"{registry.VERSION_FIELD_PREFIX}{version}")
            pipe.publish(keys.EVENTS_CHANNEL, event("unregistered", model, version))
            await pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
