"""Security fixtures: a real redis-server holding token keys, and the real gateway wired the way
``serve`` wires it (``gateway_security`` through the interceptor / middleware seams)."""

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from sluice.auth.key_material import KeySet
from sluice.auth.store import TokenStore
from sluice_gateway.app import Gateway
from sluice_gateway.security import gateway_security

from tests.integration.gateway.conftest import make_settings
from tests.support.redis_server import RedisServer


def now_ms() -> int:
    return int(time.time() * 1000)


async def install_keys(
    redis: "aioredis.Redis", *, expiration_min: float = 60.0, age_min: float = 0
) -> KeySet:
    """Fresh keys in Redis; ``age_min`` makes them as old as that (expired past expiration_min)."""
    keyset = KeySet.generate(now_ms() - int(age_min * 60_000), expiration_min)
    await TokenStore(redis).install(keyset)
    return keyset


def bearer(token: str) -> str:
    return f"Bearer {token}"


@pytest.fixture
async def keyset(redis_client: "aioredis.Redis") -> KeySet:
    return await install_keys(redis_client)


@pytest.fixture
def security_overrides() -> dict[str, Any]:
    """Override in a test module to change the secured gateway's settings."""
    return {}


@pytest.fixture
async def secure_gateway(
    redis_server: RedisServer, keyset: KeySet, security_overrides: dict[str, Any]
) -> AsyncIterator[Gateway]:
    # No key cache: a test that swaps the keys in Redis sees the effect on the next call.
    settings = make_settings(redis_server.url, token_cache_s=0, **security_overrides)
    security = gateway_security(settings)
    gw = Gateway(settings, interceptors=security.interceptors, rest_middlewares=security.rest_middlewares)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(grace_s=0)
        await security.aclose()


@pytest.fixture
async def grpc_channel(secure_gateway: Gateway) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{secure_gateway.port}") as channel:
        yield channel


@pytest.fixture
async def rest(secure_gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{secure_gateway.rest_port}") as session:
        yield session
