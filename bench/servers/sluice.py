"""Sluice as a user runs it: ``sluice start --ncs --model-store S --models ... --ts-config C`` with a
private runtime folder (SLUICE_HOME) and free loopback ports; ``sluice stop`` afterwards."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.servers.common import (
    Ports,
    StartTiming,
    config_properties,
    log_tail,
    ping_healthy,
    predict_ok,
    wait_until,
)

START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 120.0


@dataclass
class SluiceServer:
    home: Path
    store: Path
    ports: Ports = field(default_factory=Ports.free)
    name: str = "sluice"
    extra_properties: dict[str, Any] = field(default_factory=dict)
    # More environment for the services (OTEL_* for tracing).
    extra_env: dict[str, str] = field(default_factory=dict)
    # gRPC served over TLS (enable_grpc_ssl): how the readiness probe connects.
    grpc_credentials: grpc.ChannelCredentials | None = None

    @property
    def redis_url(self) -> str:
        """The private Redis as the services reach it (the pid file's URL carries its password)."""
        return str(self._pid_file()["redis_url"])

    def torch_threads(self) -> dict[str, int]:
        """Model -> the torch threads the manager gave its running worker (its launch records)."""
        import redis
        from sluice.redis import keys

        client = redis.Redis.from_url(self.redis_url, socket_timeout=5.0)
        try:
            records = client.hgetall(keys.LAUNCHED_WORKERS)
        finally:
            client.close()
        threads = {}
        for raw in records.values():
            record = json.loads(raw)
            if not record.get("stop_requested_unix_ms"):
                threads[str(record["model_name"])] = int(record["placement"]["torch_threads"])
        return threads

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLUICE_HOME"] = str(self.home)
        env.pop("SLUICE_TS_CONFIG", None)
        env.update(self.extra_env)
        return env

    def _cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "sluice_cli", *args]

    def start(
        self, models: list[str], *, models_json: Mapping[str, Any] | None = None, probe: bytes | None = None
    ) -> StartTiming:
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "config.properties"
        config.write_text(config_properties(self.ports, models_json, **self.extra_properties))
        argv = self._cli("start", "--ncs", "--model-store", str(self.store), "--ts-config", str(config))
        if models:
            argv += ["--models", *(f"{name}={name}.mar" if "=" not in name else name for name in models)]
        log = self.home / "bench-start.log"
        started = time.perf_counter()
        with log.open("wb") as out:
            process = subprocess.Popen(argv, env=self._env(), stdout=out, stderr=subprocess.STDOUT)

        def failed() -> str | None:
            code = process.poll()
            if code not in (None, 0):
                return f"sluice start exited with {code}:\n{log_tail(log)}"
            return None

        try:
            to_healthy = wait_until(
                lambda: ping_healthy(self.ports.grpc_target, 0.2, self.grpc_credentials),
                timeout_s=START_TIMEOUT_S,
                abort=failed,
            )
            first = None
            if probe is not None:
                first = to_healthy + wait_until(
                    lambda: predict_ok(self.ports.grpc_target, probe, 1.0),
                    timeout_s=START_TIMEOUT_S,
                    interval_s=0.01,
                    abort=failed,
                )
            code = process.wait(timeout=START_TIMEOUT_S)
        except BaseException:
            process.kill()
            self.stop()
            raise
        to_ready = time.perf_counter() - started
        if code != 0:
            self.stop()
            raise RuntimeError(f"sluice start exited with {code}:\n{log_tail(log)}")
        return StartTiming(to_healthy_s=to_healthy, to_ready_s=to_ready, to_first_prediction_s=first)

    def stop(self) -> None:
        subprocess.run(
            self._cli("stop"), env=self._env(), capture_output=True, timeout=STOP_TIMEOUT_S, check=False
        )

    def _pid_file(self) -> dict[str, Any]:
        try:
            loaded: dict[str, Any] = json.loads((self.home / "sluice.pid").read_text())
            return loaded
        except (OSError, ValueError):
            return {}

    def processes(self) -> dict[str, list[psutil.Process]]:
        """Role -> processes: the services of the pid file, ``worker:<model>:<worker id>`` for each
        worker (named by the manager's launch records) and ``standby`` for the standby worker."""
        roles: dict[str, list[psutil.Process]] = {}
        for ref in self._pid_file().get("processes", []):
            try:
                process = psutil.Process(int(ref["pid"]))
            except psutil.Error:
                continue
            roles[ref["name"]] = [process]
            if ref["name"] == "manager":
                labels = self._worker_labels()
                for child in _children(process):
                    label = labels.get(child.pid)
                    roles[f"worker:{label}" if label else "standby"] = [child]
        return roles

    def _worker_labels(self) -> dict[int, str]:
        """pid -> ``<model>:<worker id>`` from the manager's launch records."""
        import redis
        from sluice.redis import keys

        client = redis.Redis.from_url(self.redis_url, socket_timeout=5.0)
        try:
            records = client.hgetall(keys.LAUNCHED_WORKERS)
        except redis.RedisError:
            return {}
        finally:
            client.close()
        labels = {}
        for raw in records.values():
            record = json.loads(raw)
            if record.get("launcher") == "process" and str(record.get("handle", "")).isdigit():
                labels[int(record["handle"])] = f"{record['model_name']}:{record['worker_id']}"
        return labels


def _children(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [
            child
            for child in process.children(recursive=True)
            if "sluice_worker" in " ".join(child.cmdline())
        ]
    except psutil.Error:
        return []
