"""Sluice's processes (gateway, workers, manager) as subprocesses against a test redis-server, and model
versions registered with plain Redis writes, for the integration and compat tiers.

Imports no ``sluice.v1`` module: the compat tier loads third-party protos declaring the same packages.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from io import BufferedWriter
from pathlib import Path
from typing import Any

import redis
import yaml
from sluice.kserve.declaration import parse_model_tensors
from sluice.redis import keys
from sluice.registry.records import StartupModel, StartupReport, VersionRecord, VersionState

from tests.support.models import ModelSpec, write_model_dir
from tests.support.redis_server import free_port

STOP_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 90.0


class Service:
    """``python -m <module> <args>`` with ``env`` over a clean environment, output in ``log_path``."""

    def __init__(self, module: str, args: list[str], env: Mapping[str, str], log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self._log: BufferedWriter = log_path.open("ab")
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_") and k != "TS_CONFIG_FILE"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env={**base, "PYTHONUNBUFFERED": "1", **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self, tail_chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-tail_chars:]

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        self._log.close()


def register(redis_url: str, spec: ModelSpec, root: Path, **overrides: Any) -> dict[str, Any]:
    """Unpack ``spec`` under ``root`` and register it as the manager would (active, default version),
    with settings from its model-config.yaml. Returns the stored record as a dict."""
    model_dir = write_model_dir(spec, root / "models" / f"{spec.name}-{spec.version}")
    config: dict[str, Any] = {}
    if spec.config_file:
        config = yaml.safe_load((model_dir / spec.config_file).read_text()) or {}
    fields: dict[str, Any] = {
        "model_name": spec.name,
        "version": spec.version,
        "model_url": f"{spec.name}.mar",
        "model_dir": str(model_dir),
        "handler": spec.handler,
        "batch_size": config.get("batchSize", 1),
        "max_batch_delay_ms": config.get("maxBatchDelay", 100),
        "response_timeout_s": config.get("responseTimeout", 120),
        "job_queue_size": config.get("jobQueueSize") or 100,
        "min_workers": config.get("minWorkers", 1),
        "max_workers": config.get("maxWorkers", 1),
        "model_yaml_config": config,
        "tensors": parse_model_tensors(config),
        "registered_unix_ms": int(time.time() * 1000),
    }
    record = VersionRecord(**{**fields, **overrides})
    client = redis.Redis.from_url(redis_url)
    try:
        pipe = client.pipeline(transaction=True)
        pipe.hset(
            keys.version_config(spec.name, spec.version),
            mapping={
                "record": record.to_json(),
                "state": VersionState.ACTIVE.value,
                "job_queue_size": record.job_queue_size,
            },
        )
        pipe.hset(keys.model(spec.name), f"v:{spec.version}", record.registered_unix_ms)
        pipe.hsetnx(keys.model(spec.name), "default", spec.version)
        pipe.zadd(keys.MODELS, {spec.name: 0})
        pipe.execute()
    finally:
        client.close()
    loaded: dict[str, Any] = json.loads(record.to_json())
    return loaded


def serve_models(
    redis_url: str, builds: Mapping[str, Callable[[str], ModelSpec]], root: Path
) -> dict[str, Service]:
    """Register each model (built under its name) as version 1.0 and start one worker for it; the
    workers by model name."""
    for name, build in builds.items():
        register(redis_url, build(name), root)
    return {name: start_worker(redis_url, name, "1.0", root / "logs") for name in builds}


def start_worker(redis_url: str, model: str, version: str, log_dir: Path, *args: str) -> Service:
    return Service(
        "sluice_worker",
        ["--model-name", model, "--model-version", version, *args],
        {"SLUICE_REDIS_URL": redis_url},
        log_dir / f"worker-{model}-{version}-{time.monotonic_ns()}.log",
    )


def start_gateway(redis_url: str, log_dir: Path, **settings: str) -> tuple[Service, int]:
    """A gateway on free ports (gRPC, REST, metrics); token auth off unless ``settings`` say otherwise.
    Returns the service and its gRPC port."""
    port = free_port()
    env = {
        "SLUICE_REDIS_URL": redis_url,
        "SLUICE_GRPC_INFERENCE_PORT": str(port),
        "SLUICE_INFERENCE_ADDRESS": f"http://127.0.0.1:{free_port()}",
        "SLUICE_METRICS_ADDRESS": f"http://127.0.0.1:{free_port()}",
        "SLUICE_DISABLE_TOKEN_AUTHORIZATION": "true",
    }
    env.update({f"SLUICE_{key.upper()}": value for key, value in settings.items()})
    return Service("sluice_gateway", [], env, log_dir / f"gateway-{port}.log"), port


def wait_workers_ready(
    redis_url: str, workers: Mapping[str, Service], timeout_s: float = READY_TIMEOUT_S
) -> None:
    """Wait until every model named in ``workers`` has a READY worker (any version)."""
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout_s
    try:
        pending = set(workers)
        while pending and time.monotonic() < deadline:
            for model in list(pending):
                service = workers[model]
                if not service.alive():
                    raise AssertionError(f"worker for {model} exited:\n{service.log()}")
                if any(client.hlen(key) for key in client.scan_iter(f"sluice:{{{model}:*}}:workers")):
                    pending.discard(model)
            time.sleep(0.1)
    finally:
        client.close()
    if pending:
        logs = "\n".join(workers[m].log() for m in pending)
        raise AssertionError(f"workers not READY within {timeout_s} s: {sorted(pending)}\n{logs}")


def startup_done(redis_url: str, models: Iterable[tuple[str, str, int]]) -> None:
    """Write the manager's startup report (what ServerReady waits for), as a finished startup."""
    report = StartupReport(
        manager_pid=os.getpid(),
        started_unix_ms=int(time.time() * 1000),
        done=True,
        models=[StartupModel(model_name=m, version=v, min_workers=n) for m, v, n in models],
    )
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(keys.STARTUP_REPORT, report.to_json())
    finally:
        client.close()
