"""Fixtures for worker integration tests: a Redis per test module (workers take seconds to start, so
tests of one module share them), an async client per test, and cleanup of worker processes."""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.integration.worker.harness import WorkerProcess
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.kill()


@pytest.fixture
async def client(module_redis: RedisServer) -> AsyncIterator["aioredis.Redis"]:
    connection: aioredis.Redis = aioredis.Redis.from_url(module_redis.url)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Worker processes a test starts; whatever is still running afterwards is stopped."""
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()
