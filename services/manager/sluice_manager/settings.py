"""The manager's settings: TorchServe's ``config.properties`` keys with TorchServe's defaults, plus
Sluice's own (``sluice_*`` in ``config.properties``, ``SLUICE_*`` in the environment).

Built once in ``__main__`` and passed down. ``SLUICE_MODEL_STORE`` / ``SLUICE_LOAD_MODELS`` (set by
``sluice start`` from ``--model-store`` / ``--models``) beat ``config.properties``, as TorchServe's
flags do.
"""

import sys
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field
from sluice.settings import CommonSettings

GIB = 1024**3


class ManagerSettings(CommonSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {
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
        "disable_token_authorization": "disable_token_authorization",
        # Sluice's keys.
        "sluice_redis_url": "redis_url",
        "sluice_redis_port": "redis_port",
        "sluice_launcher": "launcher",
        "sluice_worker_python": "worker_python",
        "sluice_worker_module": "worker_module",
        "sluice_reconcile_interval_s": "reconcile_interval_s",
        "sluice_heartbeat_grace_s": "heartbeat_grace_s",
        "sluice_lease_ttl_s": "lease_ttl_s",
        "sluice_worker_stop_timeout_s": "worker_stop_timeout_s",
        "sluice_archive_max_bytes": "archive_max_bytes",
        "sluice_archive_max_entries": "archive_max_entries",
        "sluice_archive_max_ratio": "archive_max_ratio",
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
    # Read by the management API (next release); accepted now so the CLI can pass them on.
    enable_model_api: bool = False
    disable_token_authorization: bool = False

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
    reconcile_interval_s: float = Field(default=1.0, gt=0)
    # A READY worker whose heartbeat key has been gone this long while its process runs is killed.
    heartbeat_grace_s: float = Field(default=2.0, ge=0)
    lease_ttl_s: float = Field(default=10.0, gt=0)
    # A worker asked to stop (SIGTERM) gets this long to drain before SIGKILL.
    worker_stop_timeout_s: float = Field(default=30.0, gt=0)

    archive_max_bytes: int = Field(default=16 * GIB, gt=0)
    archive_max_entries: int = Field(default=10_000, gt=0)
    archive_max_ratio: int = Field(default=100, gt=0)

    @property
    def models_path(self) -> Path:
        return (self.models_dir or self.home / "models").absolute()

    @property
    def logs_path(self) -> Path:
        return (self.logs_dir or self.home / "logs").absolute()
