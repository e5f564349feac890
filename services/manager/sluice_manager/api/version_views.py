"""What DescribeModel reports, read live: the version's workers (launched by a manager, or announced
by themselves) with their status, pid and memory, and its job stream's length.

A worker is READY when it announced READY, its heartbeat is alive and nobody asked it to stop; any
other worker (loading, draining, unresponsive) is reported UNLOADING, as TorchServe reports a worker
thread that is not running a loaded model. Memory is the process's RSS for workers on this host;
workers elsewhere report 0.
"""

import psutil
import redis.asyncio as aioredis
from sluice import keys
from sluice.records import VersionRecord, WorkerStatus

from sluice_manager.api.model_views import VersionView, WorkerView
from sluice_manager.supervision.launchers.legacy_base import LaunchRecord
from sluice_manager.supervision.worker_state import AnnouncedWorker, WorkerStateStore


def process_memory(host: str, this_host: str, pid: int) -> int:
    if host != this_host or pid <= 0:
        return 0
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


def worker_views(
    launched: list[LaunchRecord], announced: dict[str, AnnouncedWorker], this_host: str
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
        else:
            assert launch is not None
            pid, host, started = launch.pid or 0, launch.host, launch.started_unix_ms
        views.append(
            WorkerView(
                worker_id=worker_id,
                ready=ready and not stopping,
                pid=pid,
                started_unix_ms=started,
                memory_bytes=process_memory(host, this_host, pid),
                gpu=seen.record.gpu if seen is not None else False,
            )
        )
    return tuple(views)


async def version_view(
    redis: "aioredis.Redis", record: VersionRecord, launched: dict[str, LaunchRecord], this_host: str
) -> VersionView:
    model, version = record.model_name, record.version
    store = WorkerStateStore(redis)
    mine = [r for r in launched.values() if (r.model_name, r.version) == (model, version)]
    announced = await store.announced(model, version)
    pending = int(await redis.xlen(keys.job_stream(model, version)))
    return VersionView(record, worker_views(mine, announced, this_host), pending)


async def worker_counts(redis: "aioredis.Redis", model: str, version: str) -> tuple[int, int]:
    """(READY workers not asked to stop, workers of the version still around in any state)."""
    store = WorkerStateStore(redis)
    launched = [r for r in (await store.launched()).values() if (r.model_name, r.version) == (model, version)]
    views = worker_views(launched, await store.announced(model, version), this_host="")
    return sum(1 for view in views if view.ready), len(views)


async def ready_workers(redis: "aioredis.Redis", model: str, version: str) -> int:
    """Workers of the version that are READY with a live heartbeat (and not draining)."""
    return (await worker_counts(redis, model, version))[0]
