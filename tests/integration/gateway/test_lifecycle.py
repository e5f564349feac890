"""Startup and graceful shutdown, in process and as ``python -m sluice_gateway``; reflection."""

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from sluice.envelope import Job, Reply
from sluice.redis import keys
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings, register
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer, free_port
from tests.support.responder import Responder, ok

Start = Callable[..., Awaitable[Responder]]
REQUEST = PredictionsRequest(model_name="echo", input={"data": b"x"})
ROOT = Path(__file__).resolve().parents[3]


async def test_graceful_shutdown_finishes_in_flight_calls(
    redis_server: RedisServer, redis_client: aioredis.Redis, responder: Start
) -> None:
    gateway = Gateway(make_settings(redis_server.url))
    await gateway.start()
    await register(redis_client)
    release = asyncio.Event()

    async def held(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield ok(job, b"finished")

    peer = await responder(held)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        stub = InferenceAPIsServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        in_flight = asyncio.ensure_future(stub.Predictions(REQUEST, timeout=20))
        await peer.wait_for_jobs(1)
        stopping = asyncio.ensure_future(gateway.stop(grace_s=10))

        async def draining() -> bool:
            try:
                response = await health.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
            except grpc.aio.AioRpcError as exc:
                # The server refuses new calls, or (a call that raced its shutdown) holds them unanswered
                # until the grace period ends: either way it no longer serves.
                return exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            return bool(response.status == health_pb2.HealthCheckResponse.NOT_SERVING)

        await eventually(draining)
        release.set()
        assert (await in_flight).prediction == b"finished"
        await stopping
    # The reply stream and alive key of a gateway that stopped cleanly are gone.
    assert not await redis_client.exists(keys.reply_stream(gateway.settings.gateway_id))
    assert not await redis_client.exists(keys.gateway_alive(gateway.settings.gateway_id))


async def test_the_reply_stream_and_alive_key_expire_with_the_gateway(
    gateway: Gateway, redis_client: aioredis.Redis
) -> None:
    stream_ttl_ms = await redis_client.pttl(keys.reply_stream(gateway.settings.gateway_id))
    alive_ttl_ms = await redis_client.pttl(keys.gateway_alive(gateway.settings.gateway_id))
    assert 0 < stream_ttl_ms <= 30_000
    assert 0 < alive_ttl_ms <= 30_000


@pytest.mark.parametrize("settings_overrides", [{"enable_reflection": True}])
async def test_reflection_lists_the_services_when_enabled(
    settings_overrides: dict[str, object], channel: grpc.aio.Channel
) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async for response in stub.ServerReflectionInfo(iter([request])):
        names = {service.name for service in response.list_services_response.service}
        break
    assert "org.pytorch.serve.grpc.inference.InferenceAPIsService" in names
    assert "grpc.health.v1.Health" in names


async def test_reflection_is_off_by_default(channel: grpc.aio.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.ServerReflectionInfo(iter([request])):
            pass
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_main_serves_and_exits_zero_on_sigterm(redis_server: RedisServer, tmp_path: Path) -> None:
    port = free_port()
    # The environment and flags both reach the settings.
    env = {**_gateway_env(), "SLUICE_REDIS_URL": redis_server.url}
    flags = [
        f"--grpc-inference-port={port}",
        "--inference-address",
        f"http://127.0.0.1:{free_port()}",
        "--metrics_address",
        f"http://127.0.0.1:{free_port()}",
    ]
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sluice_gateway", *flags, env=env, stderr=log, stdout=log
        )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            response = await health.Check(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=20)
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = log_path.read_text()
    assert "gateway listening" in output
    assert str(port) in output


async def test_main_refuses_an_invalid_setting_with_one_line() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sluice_gateway",
        "--grpc-inference-port",
        "70000",
        env=_gateway_env(),
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    assert (
        stderr.decode()
        .splitlines()[-1]
        .startswith("python -m sluice_gateway: error: invalid setting grpc_inference_port: ")
    )


def _gateway_env() -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("services/shared", "services/gateway")),
    }
    env.pop("TS_CONFIG_FILE", None)
    return env
