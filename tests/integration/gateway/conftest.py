"""Gateway integration fixtures: a real redis-server, the gateway on a free loopback port, real stubs,
and the scripted responder standing in for workers."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import redis.asyncio as aioredis
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub
from sluice_gateway.app import Gateway
from sluice_gateway.settings import GatewaySettings

from tests.support.redis_server import RedisServer
from tests.support.responder import Responder, Script, echo

if TYPE_CHECKING:
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

# Short periods so failure detection happens within a test's patience.
FAST = {
    "heartbeat_interval_s": 0.2,
    "health_check_interval_s": 0.2,
    "reply_block_s": 0.5,
    "shutdown_grace_s": 5.0,
}


# Every listener on a free port, so tests never collide with each other or a running server.
FREE_PORTS = {
    "grpc_inference_port": 0,
    "inference_address": "http://127.0.0.1:0",
    "metrics_address": "http://127.0.0.1:0",
}


def make_settings(redis_url: str, **overrides: Any) -> GatewaySettings:
    return GatewaySettings(redis_url=redis_url, **{**FREE_PORTS, **FAST, **overrides})


def version_record(model: str = "echo", version: str = "1.0", **fields: Any) -> VersionRecord:
    return VersionRecord(
        model_name=model, version=version, model_url=f"{model}.mar", model_dir="/none", handler="h", **fields
    )


async def register(
    redis: "aioredis.Redis", model: str = "echo", version: str = "1.0", *, default: bool = True, **fields: Any
) -> VersionRecord:
    record = version_record(model, version, **fields)
    await RegistryStore(redis).add(record, make_default=default)
    return record


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module (or parametrize) to change the gateway's settings."""
    return {}


@pytest.fixture
async def gateway(redis_server: RedisServer, settings_overrides: dict[str, Any]) -> AsyncIterator[Gateway]:
    gw = Gateway(make_settings(redis_server.url, **settings_overrides))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(grace_s=0)


@pytest.fixture
async def channel(gateway: Gateway) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as chan:
        yield chan


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> "InferenceAPIsServiceAsyncStub":
    return InferenceAPIsServiceStub(channel)


@pytest.fixture
async def responder(
    redis_server: RedisServer,
) -> AsyncIterator[Callable[..., Awaitable[Responder]]]:
    """Factory: ``await responder(script, model=..., version=...)`` starts a responder."""
    started: list[Responder] = []

    async def start(
        script: Script = echo, *, model: str = "echo", version: str = "1.0", **kw: Any
    ) -> Responder:
        peer = await Responder(redis_server.url, model, version, script, **kw).start()
        started.append(peer)
        return peer

    yield start
    for peer in started:
        await peer.stop()
