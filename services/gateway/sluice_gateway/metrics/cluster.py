"""Cluster-wide gauges, read from Redis at scrape time (every gateway reports the same values):

- ``sluice_queue_depth``: entries in a version's job stream (queued + in flight; acked jobs are
  deleted), the autoscaling signal.
- ``sluice_workers``: workers of a version that announced READY and whose heartbeat is alive.
- ``sluice_desired_workers``: the workers the manager's autoscaler wants the version to run.
- ``sluice_batch_size``: histogram of handler batch sizes; workers HINCRBY ``keys.batch_sizes`` once
  per batch, in the pipeline that writes the batch's replies.

A scrape costs three pipelined round trips whatever the number of versions (the autoscaler's state
comes with the first).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice import keys, registry
from sluice.control_redis import ControlRedis

from sluice_gateway.metrics.exposition import MetricFamily, Sample, histogram_samples

BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True, slots=True)
class VersionStats:
    model: str
    version: str
    queue_depth: int
    live_workers: int
    batch_sizes: dict[int, int]
    # None until the manager's autoscaler has looked at the version.
    desired_workers: int | None = None

    @property
    def labels(self) -> list[tuple[str, str]]:
        return [("model_name", self.model), ("model_version", self.version)]


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
            pipe.hkeys(keys.workers(model, version))
            pipe.hgetall(keys.batch_sizes(model, version))
        scaling, *raw = await pipe.execute()
    desired = _desired_counts(scaling)
    workers = [[_text(w) for w in raw[i * 3 + 1]] for i in range(len(versions))]
    async with redis.pipeline(transaction=False) as pipe:
        for (model, version), ids in zip(versions, workers, strict=True):
            for worker_id in ids:
                pipe.exists(keys.heartbeat(model, version, worker_id))
        alive = iter(await pipe.execute())
    stats = []
    for i, (model, version) in enumerate(versions):
        live = sum(1 for _ in workers[i] if next(alive))
        sizes = {int(size): int(count) for size, count in raw[i * 3 + 2].items() if _text(size).isdigit()}
        wanted = desired.get(f"{model}:{version}")
        stats.append(VersionStats(model, version, int(raw[i * 3]), live, sizes, wanted))
    return stats


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


def families(stats: Sequence[VersionStats]) -> list[MetricFamily]:
    depth = MetricFamily(
        "sluice_queue_depth",
        "gauge",
        "Jobs queued or in flight per model version (job stream length).",
        [Sample("sluice_queue_depth", s.labels, s.queue_depth) for s in stats],
    )
    workers = MetricFamily(
        "sluice_workers",
        "gauge",
        "Live workers (READY, heartbeat alive) per model version.",
        [Sample("sluice_workers", s.labels, s.live_workers) for s in stats],
    )
    desired = MetricFamily(
        "sluice_desired_workers",
        "gauge",
        "Workers the autoscaler wants per model version (between minWorkers and maxWorkers).",
        [
            Sample("sluice_desired_workers", s.labels, s.desired_workers)
            for s in stats
            if s.desired_workers is not None
        ],
    )
    batches = MetricFamily(
        "sluice_batch_size",
        "histogram",
        "Requests per handler call, per model version.",
        [
            sample
            for s in stats
            for sample in histogram_samples("sluice_batch_size", s.labels, s.batch_sizes, BATCH_SIZE_BOUNDS)
        ],
    )
    return [depth, workers, desired, batches]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
