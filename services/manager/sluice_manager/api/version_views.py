"""What DescribeModel reports, read live: the version's workers (launched by a manager, or announced
by themselves) with their status, pid, memory, GPU use and where they run, and its job stream's length.

A worker is READY when it announced READY, its heartbeat is alive and nobody asked it to stop; any
other worker (loading, draining, unresponsive) is reported UNLOADING, as TorchServe reports a worker
thread that is not running a loaded model. Memory is what the launcher measures where it can (a
container's engine stats, a local process's RSS), else what the worker reports in its heartbeat, so
workers on any host have one.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence

from sluice.registry.records import VersionRecord, WorkerStatus

from sluice_manager.api.model_views import VersionView, WorkerView
from sluice_manager.stores import Stores
from sluice_manager.supervision.launchers.base import CONTAINER, NODE, LaunchRecord, Usage
from sluice_manager.supervision.worker_state import AnnouncedWorker, WorkerStateStore

# What the launcher measures of the given workers (by worker id).
MeasureUsage = Callable[[Sequence[LaunchRecord]], Awaitable[dict[str, Usage]]]


async def no_usage(records: Sequence[LaunchRecord]) -> dict[str, Usage]:
    return {}


def gpu_usage_text(worker: AnnouncedWorker | None) -> str:
    """TorchServe's ``gpuUsage``: ``gpuId::0 utilization.gpu [%]::37 % memory.used [MiB]::1024 MiB``."""
    if worker is None or worker.record.gpu_id is None:
        return "N/A"
    record = worker.record
    return (
        f"gpuId::{record.gpu_id} utilization.gpu [%]::{record.gpu_utilization_percent:.0f} % "
        f"memory.used [MiB]::{record.gpu_memory_used_mib:.0f} MiB"
    )


def worker_views(
    launched: list[LaunchRecord], announced: Mapping[str, AnnouncedWorker], usage: Mapping[str, Usage]
) -> tuple[WorkerView, ...]:
    by_id = {record.worker_id: record for record in launched}
    views: list[WorkerView] = []
    for worker_id in sorted(set(by_id) | set(announced), key=lambda wid: (len(wid), wid)):
        launch = by_id.get(worker_id)
        seen = announced.get(worker_id)
        stopping = launch is not None and launch.stop_requested_unix_ms > 0
        ready = seen is not None and seen.heartbeat and seen.record.status is WorkerStatus.READY
        if seen is not None:
            pid, host, started = seen.record.pid, seen.record.host, seen.record.started_unix_ms
            reported_memory = seen.record.memory_bytes
        else:
            assert launch is not None
            pid = int(launch.handle) if launch.handle.isdigit() else 0
            host, started, reported_memory = launch.host, launch.started_unix_ms, 0
        measured = usage.get(worker_id)
        container = launch.details.get(CONTAINER, "") if launch is not None else ""
        node = launch.details.get(NODE, "") if launch is not None else ""
        views.append(
            WorkerView(
                worker_id=worker_id,
                ready=ready and not stopping,
                pid=pid,
                started_unix_ms=started,
                memory_bytes=measured.memory_bytes if measured is not None else reported_memory,
                gpu=seen.record.gpu if seen is not None else False,
                gpu_usage=gpu_usage_text(seen),
                host=launch.host if launch is not None and container else host,
                container=container,
                node=node,
            )
        )
    return tuple(views)


async def version_view(
    stores: Stores,
    record: VersionRecord,
    launched: Mapping[str, LaunchRecord],
    measure: MeasureUsage = no_usage,
) -> VersionView:
    model, version = record.model_name, record.version
    mine = [r for r in launched.values() if (r.model_name, r.version) == (model, version)]
    announced = await stores.workers.announced(model, version)
    usage = await measure(mine)
    pending = await stores.jobs.count(model, version)
    scaling = await stores.workers.scaling_state(model, version)
    desired = None if scaling is None else scaling.desired
    return VersionView(record, worker_views(mine, announced, usage), pending, desired)


async def worker_counts(store: WorkerStateStore, model: str, version: str) -> tuple[int, int]:
    """(READY workers not asked to stop, workers of the version still around in any state)."""
    launched = [r for r in (await store.launched()).values() if (r.model_name, r.version) == (model, version)]
    views = worker_views(launched, await store.announced(model, version), {})
    return sum(1 for view in views if view.ready), len(views)


async def ready_workers(store: WorkerStateStore, model: str, version: str) -> int:
    """Workers of the version that are READY with a live heartbeat (and not draining)."""
    return (await worker_counts(store, model, version))[0]
