"""The manager's settings: TorchServe's ``config.properties`` keys with TorchServe's defaults, plus
Sluice's own (``sluice_*`` in ``config.properties``, ``SLUICE_*`` in the environment).

Built once in ``__main__`` and passed down. ``SLUICE_MODEL_STORE`` / ``SLUICE_LOAD_MODELS`` (set by
``sluice start`` from ``--model-store`` / ``--models``) beat ``config.properties``, as TorchServe's
flags do.
"""

import sys
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator
from sluice.auth_settings import AuthSettings

from sluice_manager.url_policy import UrlPolicy

GIB = 1024**3


class ManagerSettings(AuthSettings):
    """Token authorization (on by default: disable_token_authorization, token_expiration_min, the key
    file) comes from :class:`AuthSettings`."""

    TS_KEYS: ClassVar[dict[str, str]] = {
        **AuthSettings.TS_KEYS,
        # TorchServe's keys.
        "model_store": "model_store",
        "load_models": "load_models",
        "models": "models",
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
        "sluice_redis_url": "redis_url",
        "sluice_redis_port": "redis_port",
        "sluice_launcher": "launcher",
        "sluice_worker_python": "worker_python",
        "sluice_worker_module": "worker_module",
        "sluice_worker_standby": "worker_standby",
        "sluice_reconcile_interval_s": "reconcile_interval_s",
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
    # TorchServe's load_models: "", "standalone", "all", "a.mar,b.mar" or "name=a.mar,...".
    load_models: str = ""
    # TorchServe's `models` key: JSON {name: {version: {minWorkers, batchSize, ...}}}.
    models: str = ""
    # 0: startup models get 1 worker each (TorchServe would start one per CPU core, which runs a laptop
    # out of memory: torchserve.md section 8 row 10); registered models get 0 workers, as in TorchServe.
    default_workers_per_model: int = Field(default=0, ge=0)
    job_queue_size: int = Field(default=100, ge=1)
    default_response_timeout_s: int = Field(default=120, ge=1)
    default_startup_timeout_s: int = Field(default=120, ge=1)
    unregister_model_timeout_s: int = Field(default=120, ge=1)
    service_envelope: str = ""
    default_service_handler: str = ""
    # The manager does not import torch, so it cannot count GPUs: set number_of_gpu to hand them out.
    number_of_gpu: int = Field(default=0, ge=0)
    # Register / unregister through the management API (off by default, as in TorchServe 0.12).
    enable_model_api: bool = False
    # Model URLs the manager may fetch (sluice_manager.url_policy): comma-separated regexes, empty by
    # default (no remote URL at all; TorchServe's default allows every URL). Non-public addresses need
    # their network (CIDR) in allowed_url_networks.
    allowed_urls: str = ""
    allowed_url_networks: str = ""
    download_max_bytes: int = Field(default=16 * GIB, gt=0)
    download_timeout_s: float = Field(default=1800.0, gt=0)

    # Runtime folder (SLUICE_HOME): extracted models in <home>/models, logs in <home>/logs.
    home: Path = Path("var")
    models_dir: Path | None = None
    logs_dir: Path | None = None
    # Port of the private Redis `sluice start` runs (read by the CLI; the manager only logs it).
    redis_port: int = 6399

    launcher: Literal["process", "docker", "external"] = "process"
    # How the process launcher starts a worker: <worker_python> -m <worker_module> --model-name ...
    worker_python: str = sys.executable
    worker_module: str = "sluice_worker"
    # Keep one worker process started ahead (torch imported), so a new worker is READY ~1 s sooner;
    # it costs that process's memory (~240 MiB RSS) while no worker needs it. A custom worker_module must
    # then accept --standby (sluice.worker_standby).
    worker_standby: bool = True
    reconcile_interval_s: float = Field(default=1.0, gt=0)
    # A READY worker whose heartbeat key has been gone this long while its process runs is killed.
    heartbeat_grace_s: float = Field(default=2.0, ge=0)
    lease_ttl_s: float = Field(default=10.0, gt=0)
    # A worker asked to stop (SIGTERM) gets this long to drain before SIGKILL.
    worker_stop_timeout_s: float = Field(default=30.0, gt=0)

    archive_max_bytes: int = Field(default=16 * GIB, gt=0)
    archive_max_entries: int = Field(default=10_000, gt=0)
    archive_max_ratio: int = Field(default=100, gt=0)

    # Management API: TorchServe's addresses and defaults (REST http://host:port or unix:/path).
    management_address: str = "http://127.0.0.1:8081"
    grpc_management_address: str = "127.0.0.1"
    grpc_management_port: int = Field(default=7071, ge=0, le=65535)
    max_request_size: int = Field(default=6553500, gt=0)
    # How long a management call waits for another one holding the same model, before ABORTED / 409.
    model_lock_wait_s: float = Field(default=2.0, ge=0)
    # Control-plane tasks (Celery worker child): concurrent tasks, Redis visibility timeout (above the
    # longest task: downloads are capped at 30 min), attempts per operation, and the age after which
    # an unfinished operation that nobody runs is submitted again.
    task_concurrency: int = Field(default=2, ge=1)
    task_visibility_timeout_s: float = Field(default=3600.0, gt=0)
    task_max_attempts: int = Field(default=3, ge=1)
    task_orphan_after_s: float = Field(default=30.0, gt=0)
    # A registration waits this long for another operation on its model before its commit.
    task_lock_wait_s: float = Field(default=30.0, ge=0)
    # Fault injection (tests, T-18): a registration sleeps this long before its registry commit.
    debug_pause_before_commit_s: float = Field(default=0.0, ge=0)

    @field_validator("allowed_urls")
    @classmethod
    def _valid_patterns(cls, value: str) -> str:
        UrlPolicy.parse(value)
        return value

    @field_validator("allowed_url_networks")
    @classmethod
    def _valid_networks(cls, value: str) -> str:
        UrlPolicy.parse("", value)
        return value

    @property
    def models_path(self) -> Path:
        return (self.models_dir or self.home / "models").absolute()

    @property
    def logs_path(self) -> Path:
        return (self.logs_dir or self.home / "logs").absolute()
