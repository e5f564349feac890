"""The manager's settings: TorchServe's ``config.properties`` keys with TorchServe's defaults, plus
Sluice's own (``sluice_*`` in ``config.properties``, ``SLUICE_*`` in the environment).

Built once in ``__main__`` and passed down. ``SLUICE_MODEL_STORE`` / ``SLUICE_LOAD_MODELS`` (set by
``sluice start`` from ``--model-store`` / ``--models``) beat ``config.properties``, as TorchServe's
flags do.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from sluice.auth.settings import AuthSettings
from sluice.transport.tls import TlsSettings
from sluice.typed import (
    Bounds,
    InvalidValue,
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
)

from sluice_manager.memory_sizes import parse_bytes
from sluice_manager.models.url_policy import UrlPolicy

GIB = 1024**3


@dataclass(init=False, kw_only=True)
class ManagerSettings(AuthSettings, TlsSettings):
    """Token authorization (on by default: disable_token_authorization, token_expiration_min, the key
    file) comes from :class:`AuthSettings`."""

    TS_KEYS: ClassVar[dict[str, str]] = {
        **AuthSettings.TS_KEYS,
        **TlsSettings.TS_KEYS,
        # TorchServe's keys.
        "model_store": "model_store",
        "workflow_store": "workflow_store",
        "load_models": "load_models",
        "models": "models",
        "model_snapshot": "model_snapshot",
        "default_workers_per_model": "default_workers_per_model",
        "job_queue_size": "job_queue_size",
        "default_response_timeout": "default_response_timeout_s",
        "default_startup_timeout": "default_startup_timeout_s",
        "unregister_model_timeout": "unregister_model_timeout_s",
        "service_envelope": "service_envelope",
        "default_service_handler": "default_service_handler",
        "number_of_gpu": "number_of_gpu",
        "enable_model_api": "enable_model_api",
        "allowed_urls": "allowed_urls",
        "management_address": "management_address",
        "grpc_management_address": "grpc_management_address",
        "grpc_management_port": "grpc_management_port",
        "max_request_size": "max_request_size",
        # Sluice's keys.
        "sluice_redis_port": "redis_port",
        "sluice_launcher": "launcher",
        "sluice_cluster_id": "cluster_id",
        "sluice_worker_image": "worker_image",
        "sluice_worker_env": "worker_env",
        "sluice_worker_cpus": "worker_cpus",
        "sluice_worker_memory": "worker_memory",
        "sluice_docker_host": "docker_host",
        "sluice_docker_network": "docker_network",
        "sluice_docker_model_cache_volume": "docker_model_cache_volume",
        "sluice_docker_read_only_root": "docker_read_only_root",
        "sluice_swarm_constraints": "swarm_constraints",
        "sluice_swarm_gpu_kind": "swarm_gpu_kind",
        "sluice_artifact_address": "artifact_address",
        "sluice_artifact_url": "artifact_url",
        "sluice_worker_python": "worker_python",
        "sluice_worker_module": "worker_module",
        "sluice_worker_standby": "worker_standby",
        "sluice_reconcile_interval_s": "reconcile_interval_s",
        "sluice_worker_slots": "worker_slots",
        "sluice_heartbeat_grace_s": "heartbeat_grace_s",
        "sluice_lease_ttl_s": "lease_ttl_s",
        "sluice_worker_stop_timeout_s": "worker_stop_timeout_s",
        "sluice_archive_max_bytes": "archive_max_bytes",
        "sluice_archive_max_entries": "archive_max_entries",
        "sluice_archive_max_ratio": "archive_max_ratio",
        "sluice_allowed_url_networks": "allowed_url_networks",
        "sluice_download_max_bytes": "download_max_bytes",
        "sluice_download_timeout_s": "download_timeout_s",
        "sluice_model_lock_wait_s": "model_lock_wait_s",
        "sluice_task_concurrency": "task_concurrency",
        "sluice_task_visibility_timeout_s": "task_visibility_timeout_s",
        "sluice_task_max_attempts": "task_max_attempts",
        "sluice_task_orphan_after_s": "task_orphan_after_s",
    }

    # Where archives are looked up (TorchServe: --model-store / model_store; no default).
    model_store: Path | None = None
    # Where workflow archives (.war) are looked up (TorchServe: --workflow-store / workflow_store;
    # the model store when unset).
    workflow_store: Path | None = None
    # TorchServe's load_models: "", "standalone", "all", "a.mar,b.mar" or "name=a.mar,...".
    load_models: str = ""
    # TorchServe's `models` key: JSON {name: {version: {minWorkers, batchSize, ...}}}.
    models: str = ""
    # TorchServe's `model_snapshot` key (KServe's config.properties lists its models in one): loaded
    # at start when load_models is empty (sluice_manager.models.model_snapshot).
    model_snapshot: str = ""
    # 0: startup models get 1 worker each (TorchServe would start one per CPU core, which runs a laptop
    # out of memory: torchserve.md section 8 row 10); registered models get 0 workers, as in TorchServe.
    default_workers_per_model: NonNegativeInt = 0
    job_queue_size: Annotated[int, Bounds(ge=1)] = 100
    default_response_timeout_s: Annotated[int, Bounds(ge=1)] = 120
    default_startup_timeout_s: Annotated[int, Bounds(ge=1)] = 120
    unregister_model_timeout_s: Annotated[int, Bounds(ge=1)] = 120
    service_envelope: str = ""
    default_service_handler: str = ""
    # GPUs to hand out: unset, every GPU nvidia-smi shows (TorchServe's default); a number caps them.
    # The docker launcher cannot look at the engine's host: there it is the engine host's GPU count.
    number_of_gpu: NonNegativeInt | None = None
    # Register / unregister through the management API (off by default, as in TorchServe 0.12).
    enable_model_api: bool = False
    # Model URLs the manager may fetch (sluice_manager.models.url_policy): comma-separated regexes, empty by
    # default (no remote URL at all; TorchServe's default allows every URL). Non-public addresses need
    # their network (CIDR) in allowed_url_networks.
    allowed_urls: str = ""
    allowed_url_networks: str = ""
    download_max_bytes: PositiveInt = 16 * GIB
    download_timeout_s: PositiveFloat = 1800.0

    # Runtime folder (SLUICE_HOME): extracted models in <home>/models, logs in <home>/logs.
    home: Path = Path("var")
    models_dir: Path | None = None
    logs_dir: Path | None = None
    # Port of the private Redis `sluice start` runs (read by the CLI; the manager only logs it).
    redis_port: int = 6399

    launcher: Literal["process", "docker", "swarm", "external"] = "process"
    # Labels every container of this manager cluster (io.sluice.cluster); "" takes the one kept in
    # Redis (made by the first manager), so managers sharing a Redis share it and other stacks differ.
    cluster_id: Annotated[str, Bounds(pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}|")] = ""
    # The docker launcher: the worker image; the engine (DOCKER_HOST's forms; "" reads DOCKER_HOST,
    # else the local socket); the network workers join ("" the manager container's own); a named
    # volume where workers cache downloaded models; read-only root filesystems.
    worker_image: str = "local/sluice-worker:dev"
    docker_host: str = ""
    docker_network: str = ""
    docker_model_cache_volume: str = "sluice-model-cache"
    docker_read_only_root: bool = True
    # The swarm launcher (it also takes the docker_* settings above; the network must be an attachable
    # overlay): placement constraints of every worker service, comma-separated as
    # `docker service create --constraint` takes them ("node.labels.gpu==true"), and the generic
    # resource kind under which the nodes advertise their GPUs (number_of_gpu: how many in all).
    swarm_constraints: str = ""
    swarm_gpu_kind: Annotated[str, Bounds(pattern=r"[A-Za-z0-9_.-]+")] = "NVIDIA-GPU"
    # Worker containers' environment beyond Redis and logging: comma-separated NAME=VALUE, or NAME to
    # copy the manager's own value.
    worker_env: str = ""
    # Default limits of a worker container (model-config.yaml containerCpus / containerMemory win);
    # 0 / "": none.
    worker_cpus: NonNegativeFloat = 0.0
    worker_memory: str = ""
    # Where the artifact endpoint listens (workers that do not see the models folder fetch models
    # there: sluice_manager.models.artifact_server; port 0: any free port, which Redis advertises),
    # and the URL workers are told ("" derives it from the address).
    artifact_address: Annotated[str, Bounds(pattern=r"http://.+")] = "http://127.0.0.1:0"
    artifact_url: str = ""
    # How the process launcher starts a worker: <worker_python> -m <worker_module> --model-name ...
    worker_python: str = sys.executable
    worker_module: str = "sluice_worker"
    # Keep one worker process started ahead (torch imported), so a new worker is READY ~1 s sooner;
    # it costs that process's memory (~240 MiB RSS) while no worker needs it. A custom worker_module must
    # then accept --standby (sluice.lifecycle.worker_standby).
    worker_standby: bool = True
    reconcile_interval_s: PositiveFloat = 1.0
    # Workers the launcher's host may run in all: the autoscaler never goes past it (beside each
    # version's maxWorkers). 0: twice the cores the launcher reports.
    worker_slots: NonNegativeInt = 0
    # A READY worker whose heartbeat key has been gone this long while its process runs is killed.
    heartbeat_grace_s: NonNegativeFloat = 2.0
    lease_ttl_s: PositiveFloat = 10.0
    # A worker asked to stop (SIGTERM) gets this long to drain before SIGKILL.
    worker_stop_timeout_s: PositiveFloat = 30.0

    archive_max_bytes: PositiveInt = 16 * GIB
    archive_max_entries: PositiveInt = 10_000
    archive_max_ratio: PositiveInt = 100

    # Management API: TorchServe's addresses and defaults (REST http://host:port or unix:/path).
    management_address: str = "http://127.0.0.1:8081"
    grpc_management_address: str = "127.0.0.1"
    grpc_management_port: Port = 7071
    max_request_size: PositiveInt = 6553500
    # How long a management call waits for another one holding the same model, before ABORTED / 409.
    model_lock_wait_s: NonNegativeFloat = 2.0
    # Control-plane tasks (Celery worker child): concurrent tasks, Redis visibility timeout (above the
    # longest task: downloads are capped at 30 min), attempts per operation, and the age after which
    # an unfinished operation that nobody runs is submitted again.
    task_concurrency: Annotated[int, Bounds(ge=1)] = 2
    task_visibility_timeout_s: PositiveFloat = 3600.0
    task_max_attempts: Annotated[int, Bounds(ge=1)] = 3
    task_orphan_after_s: PositiveFloat = 30.0
    # A registration waits this long for another operation on its model before its commit.
    task_lock_wait_s: NonNegativeFloat = 30.0
    # Fault injection (tests, T-18): a registration sleeps this long before its registry commit.
    debug_pause_before_commit_s: NonNegativeFloat = 0.0

    def check(self) -> None:
        super().check()
        try:
            UrlPolicy.parse(self.allowed_urls, self.allowed_url_networks)
        except ValueError as exc:
            # The message starts with the key it is about.
            raise InvalidValue("", str(exc)) from None
        if self.worker_memory:
            try:
                parse_bytes(self.worker_memory)
            except ValueError as exc:
                raise InvalidValue("worker_memory", str(exc)) from None

    @property
    def worker_memory_bytes(self) -> int:
        return parse_bytes(self.worker_memory) if self.worker_memory else 0

    @property
    def models_path(self) -> Path:
        return (self.models_dir or self.home / "models").absolute()

    @property
    def logs_path(self) -> Path:
        return (self.logs_dir or self.home / "logs").absolute()
