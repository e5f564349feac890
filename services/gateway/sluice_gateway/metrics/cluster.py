"""Cluster-wide gauges, read from the broker at scrape time (every gateway reports the same values):

- ``sluice_queue_depth``: entries in a version's job stream (queued + in flight; acked jobs are
  deleted), the autoscaling signal.
- ``sluice_workers``: workers of a version that announced READY and whose heartbeat is alive.
- ``sluice_desired_workers``: the workers the manager's autoscaler wants the version to run.
- ``sluice_batch_size``: histogram of handler batch sizes; workers HINCRBY ``keys.batch_sizes`` once
  per batch, in the pipeline that writes the batch's replies.
- Per live worker, TorchServe's ``WorkerLoadTime`` (``WorkerName`` ``W-<worker>-<model>_<version>``,
  ``Level="Host"``, ``Hostname``): milliseconds from taking up its version to its handler loaded.
- Per live worker, from the record it refreshes with every heartbeat: ``sluice_worker_memory_bytes``
  (resident memory) and, on a GPU, TorchServe's ``GPUUtilization`` and ``GPUMemoryUtilization``
  (percent) and ``GPUMemoryUsed`` (MiB) with its labels (Level, DeviceId, Hostname) plus the worker's.
- Per live worker of a generative version (continuous batching or an async handler, read from the
  version's record): ``sluice_worker_running_requests`` (requests it holds running) and
  ``sluice_worker_slots`` (how many it takes at once).

The gauges are built here from :class:`VersionStats`, which the broker's
:meth:`~sluice_gateway.broker.seam.ClusterReader.version_stats` reads at once for every version.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sluice.registry.records import WorkerRecord

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
    # The live workers' records (memory and GPU use as of their last heartbeat).
    workers: tuple[WorkerRecord, ...] = ()
    # The version keeps requests running across handler calls (its workers report running / slots).
    generative: bool = False
    # What its handlers recorded through context.metrics: the raw fields of sluice.handler_metrics.
    handler_metrics: dict[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> list[tuple[str, str]]:
        return [("model_name", self.model), ("model_version", self.version)]


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
    return [depth, workers, desired, batches, *_worker_families(stats)]


def _worker_families(stats: Sequence[VersionStats]) -> list[MetricFamily]:
    memory = MetricFamily(
        "sluice_worker_memory_bytes",
        "gauge",
        "Resident memory of each live worker (as of its last heartbeat).",
        [
            Sample("sluice_worker_memory_bytes", [*s.labels, ("worker", w.worker_id)], w.memory_bytes)
            for s in stats
            for w in s.workers
        ],
    )
    load_time = MetricFamily(
        "WorkerLoadTime",
        "gauge",
        "Torchserve prometheus gauge metric with unit: Milliseconds",
        [
            Sample(
                "WorkerLoadTime",
                [
                    ("WorkerName", f"W-{w.worker_id}-{s.model}_{s.version}"),
                    ("Level", "Host"),
                    ("Hostname", w.host),
                ],
                w.load_ms,
            )
            for s in stats
            for w in s.workers
            if w.load_ms > 0
        ],
    )
    return [memory, load_time, *_generative_families(stats), *_gpu_families(stats)]


def _generative_families(stats: Sequence[VersionStats]) -> list[MetricFamily]:
    held = [(s, w) for s in stats if s.generative for w in s.workers]

    def gauge(name: str, help_text: str, value: Callable[[WorkerRecord], int]) -> MetricFamily:
        samples = [Sample(name, [*s.labels, ("worker", w.worker_id)], value(w)) for s, w in held]
        return MetricFamily(name, "gauge", help_text, samples)

    return [
        gauge(
            "sluice_worker_running_requests",
            "Requests each live worker of a generative model version holds running (last heartbeat).",
            lambda w: w.running,
        ),
        gauge(
            "sluice_worker_slots",
            "Requests each live worker of a generative model version takes at once.",
            lambda w: w.slots,
        ),
    ]


def _gpu_families(stats: Sequence[VersionStats]) -> list[MetricFamily]:
    on_gpu = [(s, w) for s in stats for w in s.workers if w.gpu and w.gpu_id is not None]
    if not on_gpu:
        return []

    def gpu_labels(s: VersionStats, w: WorkerRecord) -> list[tuple[str, str]]:
        # TorchServe's labels for its GPU metrics, then the worker's.
        return [
            ("Level", "Host"),
            ("DeviceId", str(w.gpu_id)),
            ("Hostname", w.host),
            *s.labels,
            ("worker", w.worker_id),
        ]

    utilization = MetricFamily(
        "GPUUtilization",
        "gauge",
        "Torchserve prometheus gauge metric with unit: Percent",
        [Sample("GPUUtilization", gpu_labels(s, w), w.gpu_utilization_percent) for s, w in on_gpu],
    )
    memory_utilization = MetricFamily(
        "GPUMemoryUtilization",
        "gauge",
        "Torchserve prometheus gauge metric with unit: Percent",
        [
            Sample("GPUMemoryUtilization", gpu_labels(s, w), w.gpu_memory_utilization_percent)
            for s, w in on_gpu
        ],
    )
    used = MetricFamily(
        "GPUMemoryUsed",
        "gauge",
        "Torchserve prometheus gauge metric with unit: Megabytes",
        [Sample("GPUMemoryUsed", gpu_labels(s, w), w.gpu_memory_used_mib) for s, w in on_gpu],
    )
    return [utilization, memory_utilization, used]
