"""TorchServe's management JSON, as pure functions of what the manager observed: ListModels pages and
DescribeModel entries, with TorchServe's field order, names and rules (torchserve.md section 7.3).

Dates follow TorchServe's format (``yyyy-MM-dd'T'HH:mm:ss.SSS'Z'``) but in UTC, where TorchServe
writes JVM local time behind its literal Z.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sluice.registry.records import VersionRecord

Json = dict[str, Any]
MAX_PAGE = 100


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    ready: bool
    pid: int
    started_unix_ms: int
    memory_bytes: int = 0
    gpu: bool = False
    # TorchServe's gpuUsage text ("N/A" off a GPU).
    gpu_usage: str = "N/A"
    # Where it runs (Sluice's additions to TorchServe's worker JSON): the host, and the short id of
    # its container ("" for a process).
    host: str = ""
    container: str = ""
    # The cluster node (a swarm worker's), "" elsewhere.
    node: str = ""


@dataclass(frozen=True)
class VersionView:
    record: VersionRecord
    workers: tuple[WorkerView, ...]
    # XLEN of the job stream: queued plus in-flight jobs.
    pending_jobs: int
    # The workers the autoscaler wants now (None before the manager looked at the version).
    desired_workers: int | None = None


@dataclass(frozen=True)
class Page:
    start: int
    stop: int
    next_token: str | None


def pretty(value: Any) -> str:
    """Gson's pretty print (2-space indent), as TorchServe writes management JSON."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def page(total: int, limit: int, token: int) -> Page:
    """TorchServe's ``ApiUtils.getModelList`` paging: limit above 100 or negative means 100 (0 stays
    0), a negative token means 0; the next token is offset + limit unless that passes the end."""
    if limit > MAX_PAGE or limit < 0:
        limit = MAX_PAGE
    token = max(token, 0)
    last = token + limit
    if last > total:
        return Page(token, total, None)
    return Page(token, last, str(last))


def model_list(entries: list[tuple[str, str]], next_token: str | None) -> Json:
    """``{"nextPageToken"?, "models": [{"modelName", "modelUrl"}]}`` (the token only when set)."""
    body: Json = {} if next_token is None else {"nextPageToken": next_token}
    body["models"] = [{"modelName": name, "modelUrl": url} for name, url in entries]
    return body


def timestamp(unix_ms: int) -> str:
    moment = datetime.fromtimestamp(unix_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{unix_ms % 1000:03d}Z"


def worker_json(worker: WorkerView) -> Json:
    """TorchServe's worker object; a container worker also says where it runs (``host``: the engine,
    ``container``: its short id), a swarm worker the node Swarm placed it on (``node``)."""
    entry: Json = {
        "id": worker.worker_id,
        "startTime": timestamp(worker.started_unix_ms),
        "status": "READY" if worker.ready else "UNLOADING",
        "memoryUsage": worker.memory_bytes,
        "pid": worker.pid,
        "gpu": worker.gpu,
        "gpuUsage": worker.gpu_usage,
    }
    if worker.container:
        entry["host"] = worker.host
        entry["container"] = worker.container
    if worker.node:
        entry["node"] = worker.node
    return entry


def describe_json(view: VersionView, customized: Json | None = None) -> Json:
    """One DescribeModel entry. Features Sluice does not implement (job tickets, per-model venvs,
    model parallelism) report TorchServe's off values. The sequence settings show
    as TorchServe shows them: when ``sequenceMaxIdleMSec`` is set, ``maxNumSequence`` the effective
    limit; ``stateful`` says whether the model is."""
    record = view.record
    sequences = record.sequence_max_idle_ms > 0
    entry: Json = {
        "modelName": record.model_name,
        "modelVersion": record.version,
        "modelUrl": record.model_url,
        "runtime": record.runtime,
        "minWorkers": record.min_workers,
        "maxWorkers": record.max_workers,
        "batchSize": record.batch_size,
        "maxBatchDelay": record.max_batch_delay_ms,
        "responseTimeout": record.response_timeout_s,
        "startupTimeout": record.startup_timeout_s,
        "maxRetryTimeoutInSec": record.max_retry_timeout_s,
        "clientTimeoutInMills": record.client_timeout_ms,
        "parallelType": "",
        "parallelLevel": 0,
        # What the workers run on (TorchServe reports "cpu" on a host without GPUs).
        "deviceType": "gpu" if any(worker.gpu for worker in view.workers) else "cpu",
        "continuousBatching": record.continuous_batching,
        "useJobTicket": False,
        "useVenv": False,
        "stateful": record.stateful,
        "sequenceMaxIdleMSec": record.sequence_max_idle_ms,
        "sequenceTimeoutMSec": record.sequence_timeout_ms if sequences else 0,
        "maxNumSequence": record.live_sequence_limit if sequences else 0,
        "maxSequenceJobQueueSize": record.max_sequence_job_queue_size if sequences else 0,
        "loadedAtStartup": record.loaded_at_startup,
        "workers": [worker_json(worker) for worker in view.workers],
        "jobQueueStatus": {
            "remainingCapacity": max(0, record.job_queue_size - view.pending_jobs),
            "pendingRequests": view.pending_jobs,
        },
        # Sluice's addition: autoscaling between minWorkers and maxWorkers.
        "autoscaling": {
            "desiredWorkers": record.min_workers if view.desired_workers is None else view.desired_workers,
            "targetUtilization": record.target_utilization,
            "targetJobsPerWorker": record.target_jobs_per_worker,
            "scaleUpAfterMSec": record.scale_up_after_ms,
            "scaleDownAfterMSec": record.scale_down_after_ms,
            "scaleCooldownMSec": record.scale_cooldown_ms,
        },
    }
    if customized is not None:
        entry["customizedMetadata"] = customized
    return entry
