"""Redis going away: restarts with and without persistence, readiness, enqueue while Redis is down."""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sluice.envelope import Job, Reply
from sluice.redis import keys
from sluice.redis.client import connect
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings, register
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer
from tests.support.responder import Responder, ok

if TYPE_CHECKING:
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
REQUEST = PredictionsRequest(model_name="echo", input={"data": b"x"})
SERVICE = "org.pytorch.serve.grpc.inference.InferenceAPIsService"


def held(release: asyncio.Event) -> Callable[[Job], AsyncIterator[Reply]]:
    async def script(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield ok(job, b"after restart")

    return script


async def health_status(channel: grpc.aio.Channel, service: str = "") -> int:
    response = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service))
    status: int = response.status
    return status


async def wait_for_health(channel: grpc.aio.Channel, status: int, timeout_s: float = 5.0) -> None:
    async def reached() -> bool:
        return await health_status(channel) == status

    await eventually(reached, timeout_s)


async def test_restart_with_aof_keeps_in_flight_calls_and_serving(
    redis_server: RedisServer,
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    responder: Start,
) -> None:
    await register(redis_client)
    release = asyncio.Event()
    peer = await responder(held(release))
    in_flight = asyncio.ensure_future(stub.Predictions(REQUEST, timeout=20))
    await peer.wait_for_jobs(1)
    await asyncio.to_thread(redis_server.restart)
    release.set()
    assert (await in_flight).prediction == b"after restart"
    assert (await stub.Predictions(REQUEST, timeout=10)).prediction == b"after restart"


@pytest.fixture
def volatile_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "volatile", appendonly=False)
    server.start()
    yield server
    if server.process is not None:
        server.kill()


async def test_restart_without_persistence_fails_in_flight_calls_at_once(volatile_redis: RedisServer) -> None:
    gateway = Gateway(make_settings(volatile_redis.url))
    await gateway.start()
    redis = connect(volatile_redis.url)
    peer = Responder(volatile_redis.url, "echo", "1.0", held(asyncio.Event()))
    try:
        await register(redis)
        await peer.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            stub = InferenceAPIsServiceStub(channel)
            in_flight = asyncio.ensure_future(stub.Predictions(REQUEST, timeout=30))
            await peer.wait_for_jobs(1)
            await asyncio.to_thread(volatile_redis.restart)
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await in_flight
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "reply stream was lost" in (caught.value.details() or "")
            assert time.monotonic() - started < 3
            assert gateway.replies.in_flight == 0
            # The stream is back and the gateway serves once the registry and a worker are back.
            assert await redis.exists(keys.reply_stream(gateway.settings.gateway_id))
            await register(redis)
            peer.script = _echo_ok
            await peer.announce()
            assert (await stub.Predictions(REQUEST, timeout=10)).prediction == b"ok"
    finally:
        await peer.stop()
        await redis.aclose()
        await gateway.stop(grace_s=0)


async def _echo_ok(job: Job) -> AsyncIterator[Reply]:
    yield ok(job, b"ok")


async def test_health_follows_redis(
    redis_server: RedisServer,
    channel: grpc.aio.Channel,
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    responder: Start,
) -> None:
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert await health_status(channel) == serving
    assert await health_status(channel, SERVICE) == serving
    await register(redis_client)
    await responder()
    await stub.Predictions(REQUEST, timeout=5)  # warms the registry cache

    await asyncio.to_thread(redis_server.stop)
    await wait_for_health(channel, not_serving)
    assert await health_status(channel, SERVICE) == not_serving
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(REQUEST, timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(PredictionsRequest(model_name="uncached"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE

    await asyncio.to_thread(redis_server.start)
    await wait_for_health(channel, serving)
    assert (await stub.Predictions(REQUEST, timeout=10)).prediction == b"x"


async def test_a_gateway_started_before_redis_waits_for_it(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "late")  # not started yet
    gateway = Gateway(make_settings(server.url))
    await gateway.start()
    peer = Responder(server.url, "echo", "1.0", _echo_ok)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            assert await health_status(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
            await asyncio.to_thread(server.start)
            await wait_for_health(channel, health_pb2.HealthCheckResponse.SERVING)
            redis = connect(server.url)
            await register(redis)
            await redis.aclose()
            await peer.start()
            stub = InferenceAPIsServiceStub(channel)
            assert (await stub.Predictions(REQUEST, timeout=10)).prediction == b"ok"
    finally:
        await peer.stop()
        await gateway.stop(grace_s=0)
        if server.process is not None:
            server.kill()
