"""The Redis store (WorkerStateStore) passes the supervision store contract on a real redis-server."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from sluice.redis import keys
from sluice.registry.records import VersionRecord, WorkerRecord
from sluice.registry.store import RegistryStore
from sluice_manager.supervision.worker_state import WorkerStateStore

from tests.support.redis_server import RedisServer
from tests.support.state_store_contract import CONTRACT, CONTRACT_IDS, StoreUnderTest


@pytest.fixture
async def store_under_test(redis_server: RedisServer) -> AsyncIterator[StoreUnderTest]:
    redis: aioredis.Redis = aioredis.Redis.from_url(redis_server.url)

    async def register(record: VersionRecord, active: bool) -> None:
        registry = RegistryStore(redis)
        await registry.add(record, make_default=False)
        if not active:
            await registry.mark_removing(record.model_name, record.version)

    async def announce(model: str, version: str, record: WorkerRecord, ttl_s: float) -> None:
        await redis.set(keys.heartbeat(model, version, record.worker_id), record.pid, px=int(ttl_s * 1000))
        await redis.hset(keys.workers(model, version), record.worker_id, record.to_json())

    async def enqueue(model: str, version: str, count: int) -> None:
        stream = keys.job_stream(model, version)
        with contextlib.suppress(ResponseError):
            await redis.xgroup_create(stream, keys.JOB_GROUP, id="0", mkstream=True)
        for _ in range(count):
            await redis.xadd(stream, {"job": "x"})

    async def take(model: str, version: str, worker_id: str, count: int) -> None:
        await redis.xreadgroup(keys.JOB_GROUP, worker_id, {keys.job_stream(model, version): ">"}, count=count)

    try:
        yield StoreUnderTest(
            WorkerStateStore(redis), register, announce, enqueue, take, asyncio.sleep, time.time
        )
    finally:
        await redis.aclose()


@pytest.mark.parametrize("check", CONTRACT, ids=CONTRACT_IDS)
async def test_contract(
    check: Callable[[StoreUnderTest], Awaitable[None]], store_under_test: StoreUnderTest
) -> None:
    await check(store_under_test)
