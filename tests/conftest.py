"""Fixtures shared by every test tier."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sluice.redis.pipelined import PipelinedRedis

from tests.support.redis_server import RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server for one test (AOF on), stopped afterwards."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.kill()


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator["aioredis.Redis"]:
    client: aioredis.Redis = aioredis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def pipelined_redis(redis_server: RedisServer) -> AsyncIterator[PipelinedRedis]:
    """The hot path's pipelined client on the test's redis-server."""
    client = PipelinedRedis(redis_server.url, timeout_s=5.0)
    try:
        yield client
    finally:
        await client.close()
