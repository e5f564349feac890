"""A canary across two real gateways: traffic weights written to the registry (as the manager's
set-weights writes them) split the calls that name no version between two versions, at both gateways;
a change reaches both through the registry's events (their cache's TTL is set far beyond the test);
a call that names its version is never moved."""

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.redis.control import ControlRedis
from sluice.registry.store import RegistryStore
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice_gateway.broker.redis_reader import RedisClusterReader

from tests.support.models import ModelSpec
from tests.support.redis_server import RedisServer
from tests.support.stack import Service, register, start_gateway, start_worker

CALLS = 2000
# The share of version 2.0 at weights 80/20 may stray this far from 0.20 (binomial sd at 2000 calls:
# 0.009).
TOLERANCE = 0.04
CHANGE_TIMEOUT_S = 10.0


def version_model(version: str) -> ModelSpec:
    handler = f"def handle(data, context):\n    return None if data is None else ['{version}'] * len(data)\n"
    return ModelSpec(name="canary", handler="handler.py", version=version, files={"handler.py": handler})


@pytest.fixture
def gateways(redis_server: RedisServer, tmp_path: Path) -> Iterator[list[int]]:
    services: list[Service] = []
    try:
        for version in ("1.0", "2.0"):
            register(redis_server.url, version_model(version), tmp_path)
            services.append(start_worker(redis_server.url, "canary", version, tmp_path / "logs"))
        ports = []
        for _ in range(2):
            gateway, port = start_gateway(redis_server.url, tmp_path / "logs", registry_cache_ttl_s="600")
            services.append(gateway)
            ports.append(port)
        for port in ports:
            for version in ("1.0", "2.0"):
                _wait_serving(port, version)
        yield ports
    finally:
        for service in services:
            service.stop()


def _wait_serving(port: int, version: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            call(port, version)
            return
        except grpc.RpcError:
            assert time.monotonic() < deadline, "the gateway does not serve"
            time.sleep(0.2)


def call(port: int, version: str = "") -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        request = pb.PredictionsRequest(model_name="canary", model_version=version, input={"data": b"x"})
        return str(stub.Predictions(request, timeout=30).prediction.decode())


def spread(ports: list[int], calls: int, version: str = "") -> Counter[tuple[int, str]]:
    """(gateway port, answering version) of ``calls`` calls, half through each gateway."""

    def one(index: int) -> tuple[int, str]:
        port = ports[index % len(ports)]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.InferenceAPIsServiceStub(channel)
            request = pb.PredictionsRequest(model_name="canary", model_version=version, input={"data": b"x"})
            return port, stub.Predictions(request, timeout=30).prediction.decode()

    with ThreadPoolExecutor(8) as pool:
        return Counter(pool.map(one, range(calls)))


def set_weights(redis_url: str, weights: dict[str, int]) -> None:
    async def write() -> None:
        client: aioredis.Redis = aioredis.Redis.from_url(redis_url)
        try:
            await RegistryStore(client).set_weights("canary", weights)
        finally:
            await client.aclose()

    asyncio.run(write())


def test_weights_split_the_calls_at_every_gateway(redis_server: RedisServer, gateways: list[int]) -> None:
    assert set(spread(gateways, 40)) == {(port, "1.0") for port in gateways}  # no weights: the default
    set_weights(redis_server.url, {"1.0": 80, "2.0": 20})
    started = time.monotonic()
    while not any(version == "2.0" for _port, version in spread(gateways, 40)):
        assert time.monotonic() - started < CHANGE_TIMEOUT_S, "the weights never reached the gateways"
    answered = spread(gateways, CALLS)
    for port in gateways:
        share = answered[(port, "2.0")] / (answered[(port, "1.0")] + answered[(port, "2.0")])
        assert abs(share - 0.20) < TOLERANCE, f"gateway {port}: version 2.0 took {share:.3f} of the calls"
    assert set(spread(gateways, 100, version="1.0")) == {(port, "1.0") for port in gateways}


def test_a_change_of_weights_reaches_every_gateway(redis_server: RedisServer, gateways: list[int]) -> None:
    set_weights(redis_server.url, {"2.0": 100})
    started = time.monotonic()
    while set(spread(gateways, 40)) != {(port, "2.0") for port in gateways}:
        assert time.monotonic() - started < CHANGE_TIMEOUT_S, "the new weights never reached every gateway"
    print(f"\nMEASURED weights applied by both gateways within {time.monotonic() - started:.2f} s")
    assert set(spread(gateways, 100)) == {(port, "2.0") for port in gateways}
    assert set(spread(gateways, 100, version="1.0")) == {(port, "1.0") for port in gateways}
    set_weights(redis_server.url, {})
    started = time.monotonic()
    while set(spread(gateways, 40)) != {(port, "1.0") for port in gateways}:
        assert time.monotonic() - started < CHANGE_TIMEOUT_S, "cleared weights never reached every gateway"


async def test_the_reader_finds_the_version_a_sequence_lives_on(redis_server: RedisServer) -> None:
    client: aioredis.Redis = aioredis.Redis.from_url(redis_server.url)
    control = ControlRedis(redis_server.url)
    try:
        await client.hset(keys.sequence("canary", "2.0", "seq-7"), "holder", "9001")
        reader = RedisClusterReader(control)
        assert await reader.sequence_version("canary", ["1.0", "2.0"], "seq-7") == "2.0"
        assert await reader.sequence_version("canary", ["1.0", "2.0"], "seq-8") is None
    finally:
        await control.aclose()
        await client.aclose()
