"""The two Sluice stacks `make bench-containers` compares (bench/containers.py): ``sluice start`` on this
host, each with a redis-server of its own on a loopback TCP port, alike but for the launcher:

- ``process``: workers are local processes (the default);
- ``docker``: workers are containers of the worker image on the host's network (so they reach the
  same loopback Redis), labelled with a cluster id of the bench's own, the model fetched by digest
  from the manager's artifact endpoint into a model cache volume of the bench's own.

Gateway, manager and Redis are the same processes in both, so a difference is what running a worker in
a container costs. Worker containers outlive ``sluice stop``: :meth:`Stack.stop` removes them.
"""

import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import redis
from sluice.redis import keys
from sluice.v1 import torchserve_management_pb2 as mgmt

from bench.models import MODEL_VERSION
from bench.registration import MANAGEMENT_SERVICE
from bench.servers.common import Ports, predict_ok, wait_until
from bench.servers.sluice import SluiceServer

WORKER_IMAGE = "local/sluice-worker:dev"
CALL_TIMEOUT_S = 600


def docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Stack:
    launcher: str
    server: SluiceServer
    redis: "subprocess.Popen[bytes]"
    cluster: str

    @property
    def cache_volume(self) -> str:
        return f"{self.cluster}-model-cache"

    @classmethod
    def start(cls, launcher: str, work: Path, store: Path) -> "Stack":
        ports = Ports.free()
        redis = subprocess.Popen(
            ["redis-server", "--port", str(ports.redis), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        cluster = f"bench{secrets.token_hex(3)}"
        home = work / launcher
        shutil.rmtree(home, ignore_errors=True)
        properties: dict[str, str | int] = {
            "sluice_redis_url": f"redis://127.0.0.1:{ports.redis}/0",
            "sluice_launcher": launcher,
            "sluice_cluster_id": cluster,
            "sluice_worker_stop_timeout_s": 10,
        }
        if launcher == "docker":
            properties |= {
                "sluice_worker_image": WORKER_IMAGE,
                "sluice_docker_network": "host",
                "sluice_docker_model_cache_volume": f"{cluster}-model-cache",
            }
        server = SluiceServer(home, store, ports, name=f"sluice-{launcher}", extra_properties=properties)
        stack = cls(launcher, server, redis, cluster)
        try:
            server.start([])
        except BaseException:
            stack.stop()
            raise
        return stack

    def stop(self) -> None:
        self.server.stop()
        containers = docker("ps", "-aq", "--filter", f"label=io.sluice.cluster={self.cluster}").split()
        if containers:
            docker("rm", "-f", *containers)
        docker("volume", "rm", "-f", self.cache_volume, check=False)
        self.redis.terminate()
        self.redis.wait(timeout=30)

    def drop_model_cache(self) -> None:
        """Empty the docker stack's model cache (no worker may be running): the next worker fetches."""
        docker("volume", "rm", "-f", self.cache_volume, check=False)

    # Management ----------------------------------------------------------------------------------
    def _call(self, method: str, request: bytes) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.server.ports.grpc_management}") as channel:
            path = f"{MANAGEMENT_SERVICE}/{method}"
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
            call(request, timeout=CALL_TIMEOUT_S)

    def register(self, model: str, workers: int, probe: bytes) -> float:
        """Seconds from RegisterModel (synchronous) until ``probe`` predicts."""
        request = mgmt.RegisterModelRequest(url=f"{model}.mar", initial_workers=workers, synchronous=True)
        started = time.perf_counter()
        self._call("RegisterModel", request.SerializeToString())
        wait_until(lambda: predict_ok(self.server.ports.grpc_target, probe, 5.0), timeout_s=300)
        return time.perf_counter() - started

    def scale(self, model: str, workers: int) -> float:
        """Seconds ScaleWorker (synchronous) takes to have ``workers`` READY."""
        request = mgmt.ScaleWorkerRequest(
            model_name=model, min_worker=workers, max_worker=workers, synchronous=True
        )
        started = time.perf_counter()
        self._call("ScaleWorker", request.SerializeToString())
        return time.perf_counter() - started

    def unregister(self, model: str) -> None:
        self._call("UnregisterModel", mgmt.UnregisterModelRequest(model_name=model).SerializeToString())

    # Workers -------------------------------------------------------------------------------------
    def busiest_worker(self, model: str) -> str:
        """The worker id holding the most of ``model``'s jobs (pending entries of its consumer)."""
        client = redis.Redis.from_url(self.server.redis_url, socket_timeout=5.0)
        try:
            summary: Any = client.xpending(keys.job_stream(model, MODEL_VERSION), keys.JOB_GROUP)
        finally:
            client.close()
        consumers = summary.get("consumers") or []
        if not consumers:
            raise RuntimeError(f"no worker of {model} holds a job")
        busiest = max(consumers, key=lambda consumer: int(consumer["pending"]))
        name = busiest["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def kill_busiest_worker(self, model: str) -> None:
        """SIGKILL to the worker of ``model`` that holds the most jobs: its container (docker kill) or
        its process (kill -9)."""
        worker = self.busiest_worker(model)
        if self.launcher == "docker":
            found = docker("ps", "-q", "--filter", f"label=io.sluice.cluster={self.cluster}",
                           "--filter", f"label=io.sluice.worker={worker}").split()  # fmt: skip
            docker("kill", *found)
            return
        roles = self.server.processes()
        roles[f"worker:{model}:{worker}"][0].kill()
