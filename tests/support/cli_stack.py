"""The whole of Sluice as `sluice start` runs it (private redis-server, manager, gateway, workers), in a
temporary folder with free ports, for end-to-end and compatibility tests.

Imports none of Sluice's generated protobuf modules: the compat tier uses this beside TorchServe's own.
"""

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil
import redis
from sluice.redis import keys
from sluice.redis.client import connect_sync

from tests.support.redis_server import free_port

SLUICE = Path(sys.executable).parent / "sluice"
START_TIMEOUT_S = 240


@dataclass
class Stack:
    root: Path
    grpc_port: int
    management_port: int
    http_port: int
    management_http_port: int
    metrics_port: int
    redis_port: int
    # More environment for `sluice` and the services it starts.
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, extra_properties: str = "") -> "Stack":
        grpc_port, management_port, http_port, management_http_port, metrics_port, redis_port = (
            free_port() for _ in range(6)
        )
        stack = cls(
            root, grpc_port, management_port, http_port, management_http_port, metrics_port, redis_port
        )
        (root / "store").mkdir(parents=True, exist_ok=True)
        (root / "config.properties").write_text(
            f"grpc_inference_port={stack.grpc_port}\n"
            f"grpc_management_port={stack.management_port}\n"
            f"inference_address=http://127.0.0.1:{stack.http_port}\n"
            f"management_address=http://127.0.0.1:{stack.management_http_port}\n"
            f"metrics_address=http://127.0.0.1:{stack.metrics_port}\n"
            f"sluice_redis_port={stack.redis_port}\n"
            "sluice_worker_stop_timeout_s=10\n" + extra_properties
        )
        return stack

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def home(self) -> Path:
        return self.root / "var"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def sluice(self, *args: str, timeout_s: float = START_TIMEOUT_S) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            [str(SLUICE), *args],
            cwd=self.root,
            env={**clean_env(), **self.env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def start(self, models: Iterable[str] = ("all",), *flags: str) -> None:
        started = self.sluice(
            "start", "--model-store", "store", "--models", ",".join(models), "--disable-token-auth", *flags
        )
        if started.returncode != 0:
            raise RuntimeError(f"sluice start failed:\n{started.stdout}\n{started.stderr}")

    def stop(self) -> None:
        if (self.home / "sluice.pid").exists():
            self.sluice("stop", timeout_s=120)

    def redis(self) -> "redis.Redis":
        """Sluice's Redis, as the services reach it (the URL in the pid file has the private one's
        password, or names the Sentinels)."""
        return connect_sync(self.pid_file()["redis_url"], timeout_s=5)

    def pid_file(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.home / "sluice.pid").read_text())
        return loaded

    def pid_of(self, name: str) -> int:
        """The pid of a service (redis, manager, gateway) as the pid file has it now."""
        return next(int(p["pid"]) for p in self.pid_file()["processes"] if p["name"] == name)

    def supervisor_pid(self) -> int:
        return int(self.pid_file()["supervisor"]["pid"])

    def all_pids(self) -> list[int]:
        """The supervisor, the services and everything they started (workers, standbys, task
        workers), the workers found through their launch records too (a restarted manager's
        adopted workers are not its children)."""
        pids = [self.supervisor_pid(), *(int(p["pid"]) for p in self.pid_file()["processes"])]
        for pid in list(pids):
            with contextlib.suppress(psutil.Error):
                pids += [child.pid for child in psutil.Process(pid).children(recursive=True)]
        with contextlib.closing(self.redis()) as client:
            launched = cast(dict[bytes, bytes], client.hgetall(keys.LAUNCHED_WORKERS))
        pids += [int(json.loads(raw)["handle"]) for raw in launched.values()]
        return sorted(set(pids))

    def worker_pids(self, model: str, version: str = "1.0") -> dict[str, int]:
        """Worker id -> pid of the workers that announced themselves for a version."""
        client = self.redis()
        try:
            raw = cast(dict[bytes, bytes], client.hgetall(f"sluice:{{{model}:{version}}}:workers"))
        finally:
            client.close()
        return {key.decode(): int(json.loads(value)["pid"]) for key, value in raw.items()}

    def model_dir(self, model: str, version: str = "1.0") -> Path:
        client = self.redis()
        try:
            record = client.hget(f"sluice:{{{model}:{version}}}:config", "record")
        finally:
            client.close()
        assert record is not None, f"{model} {version} is not registered"
        return Path(json.loads(record)["model_dir"])

    def wait_for_workers(
        self, model: str, count: int, *, exclude: Collection[int] = frozenset(), timeout_s: float = 60
    ) -> dict[str, int]:
        """Wait until ``count`` workers (none of whose pids is in ``exclude``) are READY."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pids = {wid: pid for wid, pid in self.worker_pids(model).items() if pid not in exclude}
            if len(pids) >= count:
                return pids
            time.sleep(0.2)
        raise TimeoutError(f"{model}: {count} new worker(s) not READY within {timeout_s} s")


def clean_env() -> dict[str, str]:
    """This environment without Sluice's settings (config.properties in the stack's folder rules)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_") and k != "TS_CONFIG_FILE"}
    return {**env, "PYTHONUNBUFFERED": "1"}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
