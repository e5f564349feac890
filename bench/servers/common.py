"""What the Sluice and TorchServe controllers share: loopback ports, the config.properties both read,
readiness polling (gRPC ``Ping``) and the start timing."""

import json
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import psutil
from sluice_cli.services import port_in_use

from bench.payloads import PING_METHOD, PREDICTIONS_METHOD

LOOPBACK = "127.0.0.1"
# Below Linux's ephemeral range (32768-60999) and the tests' 20000-32767.
PORT_RANGE = (10000, 20000)
_PORT_TRIES = 200


@dataclass(frozen=True)
class Ports:
    grpc: int
    grpc_management: int
    rest: int
    management: int
    metrics: int
    redis: int

    @classmethod
    def free(cls, rng: random.Random | None = None) -> "Ports":
        """Six distinct loopback ports, free when chosen, drawn from ``PORT_RANGE``.

        Ports the kernel hands out for ``bind(0)`` come from the ephemeral range, which every
        outgoing connection (the load generator's, the JVM's, Redis clients') also draws from: a
        port chosen that way and released before the server binds it can be taken in between.
        Below the ephemeral range (and apart from the tests' range) nothing else takes them."""
        rng = rng or random.Random()
        chosen: list[int] = []
        for _ in range(_PORT_TRIES):
            if len(chosen) == 6:
                break
            port = rng.randrange(*PORT_RANGE)
            if port not in chosen and not port_in_use(LOOPBACK, port):
                chosen.append(port)
        if len(chosen) < 6:
            raise RuntimeError(f"no six free loopback ports in {PORT_RANGE[0]}-{PORT_RANGE[1] - 1}")
        return cls(*chosen)

    @property
    def grpc_target(self) -> str:
        return f"{LOOPBACK}:{self.grpc}"

    @property
    def rest_url(self) -> str:
        return f"http://{LOOPBACK}:{self.rest}"

    @property
    def management_url(self) -> str:
        return f"http://{LOOPBACK}:{self.management}"


def config_properties(ports: Ports, models_json: Mapping[str, Any] | None = None, **extra: Any) -> str:
    """The config.properties both servers read: loopback ports, no token auth, a job queue large
    enough for the deepest queue-depth cell, one worker per startup model by default."""
    lines = {
        "inference_address": f"http://{LOOPBACK}:{ports.rest}",
        "management_address": f"http://{LOOPBACK}:{ports.management}",
        "metrics_address": f"http://{LOOPBACK}:{ports.metrics}",
        "grpc_inference_address": LOOPBACK,
        "grpc_inference_port": ports.grpc,
        "grpc_management_address": LOOPBACK,
        "grpc_management_port": ports.grpc_management,
        "job_queue_size": 1000,
        "default_workers_per_model": 1,
        "enable_model_api": "true",
        "disable_token_authorization": "true",
        "sluice_redis_port": ports.redis,
    }
    if models_json:
        lines["models"] = json.dumps(models_json, separators=(",", ":"))
    lines.update(extra)
    return "".join(f"{key}={value}\n" for key, value in lines.items())


@dataclass(frozen=True)
class StartTiming:
    """Seconds from launching the start command."""

    to_healthy_s: float
    to_ready_s: float
    # Until the first successful Predictions of the probe request (when one was given).
    to_first_prediction_s: float | None = None


def ping_healthy(
    target: str, timeout_s: float = 0.5, credentials: grpc.ChannelCredentials | None = None
) -> bool:
    """TorchServe's gRPC ``Ping`` answers with a health text that says Healthy (over TLS with
    ``credentials``)."""
    opened = (
        grpc.insecure_channel(target) if credentials is None else grpc.secure_channel(target, credentials)
    )
    with opened as channel:
        ping: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PING_METHOD)
        try:
            answer = ping(b"", timeout=timeout_s)
        except grpc.RpcError:
            return False
    return b"Healthy" in answer


def predict(target: str, request: bytes, timeout_s: float = 5.0) -> bytes:
    """One ``Predictions`` call; the serialized response (grpc.RpcError when it fails)."""
    with grpc.insecure_channel(target) as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PREDICTIONS_METHOD)
        answer = call(request, timeout=timeout_s)
    return answer


def predict_ok(target: str, request: bytes, timeout_s: float = 5.0) -> bool:
    try:
        predict(target, request, timeout_s)
    except grpc.RpcError:
        return False
    return True


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((LOOPBACK, port)) == 0


def wait_until(
    check: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.005,
    abort: Callable[[], str | None] = lambda: None,
) -> float:
    """Seconds until ``check()`` is true (polled every ``interval_s``); TimeoutError past
    ``timeout_s``; RuntimeError when ``abort()`` returns a reason."""
    start = time.perf_counter()
    deadline = start + timeout_s
    while time.perf_counter() < deadline:
        if check():
            return time.perf_counter() - start
        reason = abort()
        if reason:
            raise RuntimeError(reason)
        time.sleep(interval_s)
    raise TimeoutError(f"not ready within {timeout_s:g} s")


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Server(Protocol):
    """A model server under test."""

    name: str
    ports: Ports

    def start(
        self, models: list[str], *, models_json: Mapping[str, Any] | None = None, probe: bytes | None = None
    ) -> StartTiming: ...

    def stop(self) -> None: ...

    def processes(self) -> dict[str, list[psutil.Process]]: ...
