"""Records the manager writes to Redis and gateways and workers read: model versions and workers.

Stored as JSON in hashes (see :mod:`sluice.redis.keys`), never pickled. Field names carry units.
"""

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from sluice.host_readings import HostReadings
from sluice.kserve.declaration import ModelTensors
from sluice.typed import Checked


class BatchPolicy(enum.StrEnum):
    # TorchServe's rule: wait up to max_batch_delay for the batch to fill.
    FILL = "fill"
    # Run whatever is queued as soon as the worker is idle; never wait on an idle queue.
    EAGER = "eager"


class VersionState(enum.StrEnum):
    ACTIVE = "active"
    # Being unregistered: gateways stop routing to it, queued jobs are failed.
    REMOVING = "removing"


@dataclass(frozen=True, kw_only=True)
class VersionRecord(Checked):
    """One registered model version: where its files are and how its workers run."""

    model_name: str
    version: str
    # Where the archive came from as the user gave it (TorchServe's modelUrl), and where it lies unpacked.
    model_url: str
    model_dir: str
    handler: str
    # SHA-256 of the folder's artifact tar (sluice.registry.artifact): how a worker that does not see
    # model_dir fetches and checks it. "" for versions registered before artifacts existed.
    artifact_sha256: str = ""
    runtime: str = "python"
    envelope: str = ""
    batch_size: int = 1
    max_batch_delay_ms: int = 100
    batch_policy: BatchPolicy = BatchPolicy.FILL
    response_timeout_s: int = 120
    startup_timeout_s: int = 120
    min_workers: int = 1
    max_workers: int = 1
    # Autoscaling between min_workers and max_workers (sluice_manager.supervision.autoscale): waiting
    # jobs that call for one more worker, the share of its time a worker is meant to be busy, how long
    # a need lasts before scaling up, how long the load stays low before scaling down, and the pause
    # between two changes (model-config.yaml targetJobsPerWorker, targetUtilization,
    # scaleUpAfterMSec, scaleDownAfterMSec, scaleCooldownMSec).
    target_jobs_per_worker: float = 2.0
    target_utilization: float = 0.8
    scale_up_after_ms: int = 2000
    scale_down_after_ms: int = 60000
    scale_cooldown_ms: int = 10000
    job_queue_size: int = 100
    max_retry_timeout_s: int = 300
    # How long a worker of the version asked to stop may take before it is killed (0: killed at
    # once), as the last ScaleWorker's `timeout` set it; None: the manager's worker_stop_timeout_s.
    stop_timeout_s: int | None = None
    # Deliveries of one job before it is dead-lettered (a job that keeps killing workers).
    max_deliveries: int = 3
    client_timeout_ms: int = 0
    # model-config.yaml deviceType: "" (a GPU when the host has one, TorchServe's default), "cpu" or "gpu".
    device_type: str = ""
    # Limits of each worker container (model-config.yaml containerCpus / containerMemory; 0: the
    # manager's defaults). Process workers ignore them.
    container_cpus: float = 0.0
    container_memory_bytes: int = 0
    loaded_at_startup: bool = False
    registered_unix_ms: int = 0
    # Custom keys of model-config.yaml, handed to the handler as context.model_yaml_config.
    model_yaml_config: dict[str, Any] = field(default_factory=dict)
    # KServe v2 tensors the model declares (model-config.yaml `sluice:`, see sluice.kserve.declaration).
    tensors: ModelTensors = field(default_factory=ModelTensors)
    # Stateful models (TorchServe's sequenceBatching with sequenceMaxIdleMSec > 0): every request of
    # a sequence runs on the worker that holds it, in order (docs/design.md, "Sequences").
    sequence_batching: bool = False
    sequence_max_idle_ms: int = 0
    # A sequence's longest life from its first request (0: no limit).
    sequence_timeout_ms: int = 0
    # Requests of one sequence that may wait besides the one running.
    max_sequence_job_queue_size: int = 1
    max_num_sequence: int = 1
    # Largest state a handler may save for a sequence (Sluice's save/restore API).
    sequence_state_max_bytes: int = 1024 * 1024
    # Generative models (model-config.yaml continuousBatching / asyncCommunication): the worker runs
    # an iteration loop over up to batch_size running requests, or an async handler over up to
    # max_concurrent_requests at once (docs/design.md, "Generative models").
    continuous_batching: bool = False
    async_communication: bool = False
    # Requests an async handler's worker runs at once (model-config.yaml maxConcurrentRequests;
    # TorchServe has no cap; Sluice's default is 8 x batchSize).
    max_concurrent_requests: int = 0
    # A file in the archive of request bodies each worker runs through the handler before it reports
    # READY (model-config.yaml warmupRequests; sluice.registry.warmup); empty: none.
    warmup_requests: str = ""

    @property
    def generative(self) -> bool:
        """Whether the worker keeps requests running across handler calls (their answers come in
        chunks and occupy a slot of the worker until the last)."""
        return self.continuous_batching or self.async_communication

    @property
    def slots_per_worker(self) -> int:
        """Requests one worker takes at once: batch_size, or an async handler's cap."""
        if self.async_communication:
            return self.max_concurrent_requests or 8 * max(self.batch_size, 1)
        return max(self.batch_size, 1)

    @property
    def stateful(self) -> bool:
        return self.sequence_batching and self.sequence_max_idle_ms > 0

    @property
    def live_sequence_limit(self) -> int:
        """Live sequences the version takes at once (TorchServe: max(maxNumSequence, batchSize *
        maxWorkers))."""
        return max(self.max_num_sequence, self.batch_size * max(self.max_workers, 1))


class WorkerStatus(enum.StrEnum):
    STARTING = "STARTING"
    READY = "READY"
    UNLOADING = "UNLOADING"


@dataclass(frozen=True, kw_only=True)
class WorkerRecord(Checked):
    """A worker as it announces itself in the version's ``workers`` hash."""

    worker_id: str
    pid: int
    host: str
    status: WorkerStatus
    started_unix_ms: int
    device: str = "cpu"
    gpu: bool = False
    # Refreshed with every heartbeat: the process's resident memory, and its GPU's use when it runs on
    # one (the GPU as the worker sees it; TorchServe's GPUUtilization / GPUMemoryUsed).
    memory_bytes: int = 0
    gpu_id: int | None = None
    gpu_utilization_percent: float = 0.0
    gpu_memory_utilization_percent: float = 0.0
    gpu_memory_used_mib: float = 0.0
    # The share of the time since the previous beat its handler was running (0 to 1): the
    # autoscaler's measure of how loaded the version's workers are.
    busy_share: float = 0.0
    # Generative models: requests the worker holds running (continuous batching's running set, an
    # async handler's calls in flight), and how many it takes at once (its slots).
    running: int = 0
    slots: int = 0
    # Milliseconds from the worker taking up its model version (its record read) to its handler
    # loaded, the model's files fetched on the way (TorchServe's WorkerLoadTime).
    load_ms: int = 0
    # Its host's CPU, memory and disk as of the last beat (TorchServe's system metrics).
    host_readings: HostReadings = field(default_factory=HostReadings)

    @property
    def load_share(self) -> float:
        """How loaded the worker is (0 to 1), the autoscaler's measure: its handler's busy share or,
        for a generative model's worker, the share of its slots taken, whichever is higher (a
        continuous-batching worker full of slow generations may idle between iterations; an async
        handler's calls do not run on the thread whose busy time is measured)."""
        taken = self.running / self.slots if self.slots > 0 else 0.0
        return min(1.0, max(self.busy_share, taken))


@dataclass(frozen=True, kw_only=True)
class StartupModel(Checked):
    """A model version the manager registered at startup and the workers it must have READY."""

    model_name: str
    version: str
    min_workers: int


@dataclass(frozen=True, kw_only=True)
class StartupReport(Checked):
    """The manager's startup report (:data:`sluice.redis.keys.STARTUP_REPORT`); ``sluice start`` waits on it.

    ``errors`` hold client-safe messages for startup models that could not be registered."""

    manager_pid: int
    started_unix_ms: int
    done: bool = False
    models: list[StartupModel] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def event(kind: str, model: str, version: str = "") -> str:
    """A registry event published on :data:`sluice.redis.keys.EVENTS_CHANNEL`."""
    return json.dumps({"kind": kind, "model": model, "version": version})
