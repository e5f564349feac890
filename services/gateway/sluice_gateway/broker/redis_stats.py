"""The metrics scrape's reads on Redis (:meth:`~.seam.ClusterReader.version_stats`): every version's
queue depth, workers, batch sizes, record and handler metrics, and the autoscaler's targets. A scrape
costs the model list and three pipelined round trips whatever the number of versions (the
autoscaler's state comes with the second).
"""

import json
from typing import Any

from sluice.redis import keys
from sluice.redis.control import ControlRedis
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord, WorkerRecord

from sluice_gateway.metrics.cluster import VersionStats

# Reads per version in a scrape's second pipeline: queue depth, workers, batch sizes, record,
# handler metrics.
_READS = 5


async def _versions(redis: ControlRedis) -> list[tuple[str, str]]:
    raw_models: Any = await redis.zrange(keys.MODELS, 0, -1)
    models = [_text(name) for name in raw_models]
    async with redis.pipeline(transaction=False) as pipe:
        for model in models:
            pipe.hkeys(keys.model(model))
        fields = await pipe.execute()
    prefix = registry.VERSION_FIELD_PREFIX
    return [
        (model, name[len(prefix) :])
        for model, names in zip(models, fields, strict=True)
        for name in sorted(_text(field) for field in names)
        if name.startswith(prefix)
    ]


async def read_stats(redis: ControlRedis) -> list[VersionStats]:
    versions = await _versions(redis)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.SCALING)
        for model, version in versions:
            pipe.xlen(keys.job_stream(model, version))
            pipe.hgetall(keys.workers(model, version))
            pipe.hgetall(keys.batch_sizes(model, version))
            pipe.hgetall(keys.version_config(model, version))
            pipe.hgetall(keys.handler_metrics(model, version))
        scaling, *raw = await pipe.execute()
    desired = _desired_counts(scaling)
    workers = [_records(raw[i * _READS + 1]) for i in range(len(versions))]
    async with redis.pipeline(transaction=False) as pipe:
        for (model, version), records in zip(versions, workers, strict=True):
            for record in records:
                pipe.exists(keys.heartbeat(model, version, record.worker_id))
        alive = iter(await pipe.execute())
    stats = []
    for i, (model, version) in enumerate(versions):
        live = tuple(record for record in workers[i] if next(alive))
        depth, _, raw_sizes, config, handler = raw[i * _READS : (i + 1) * _READS]
        sizes = {int(size): int(count) for size, count in raw_sizes.items() if _text(size).isdigit()}
        wanted = desired.get(f"{model}:{version}")
        generative = _generative(config)
        stats.append(
            VersionStats(
                model,
                version,
                int(depth),
                len(live),
                sizes,
                wanted,
                live,
                generative,
                {_text(field): _text(value) for field, value in handler.items()},
            )
        )
    return stats


_RECORD_FIELD = registry.RECORD_FIELD.encode()


def _generative(config: dict[bytes, bytes]) -> bool:
    """Whether the version's record, in its config hash, is generative (no record, as when the
    version went meanwhile, or an unreadable one: not)."""
    raw = config.get(_RECORD_FIELD)
    if raw is None:
        return False
    try:
        return VersionRecord.from_json(raw).generative
    except ValueError:
        return False


def _records(raw: dict[Any, Any]) -> list[WorkerRecord]:
    """Worker records as announced (unreadable ones are skipped: they count as no worker)."""
    records = []
    for value in raw.values():
        try:
            records.append(WorkerRecord.from_json(value))
        except ValueError:
            continue
    return records


def _desired_counts(scaling: dict[Any, Any]) -> dict[str, int]:
    """``<model>:<version>`` -> desired workers, from the autoscaler's states (JSON; unreadable
    entries are skipped)."""
    counts = {}
    for field, value in scaling.items():
        try:
            counts[_text(field)] = int(json.loads(value)["desired"])
        except (ValueError, KeyError, TypeError):
            continue
    return counts


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
