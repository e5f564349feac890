"""Job admission against a real Redis, for both enqueue paths: small jobs through the Lua script,
large ones by XADD checked in the same transaction. Each rule must hold the same way on both."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from sluice import keys
from sluice.errors import ErrorCode, SluiceError
from sluice.pipelined_redis import PipelinedRedis
from sluice_gateway.broker.redis_admission import LARGE_JOB_BYTES, RedisJobQueue, VersionGone

from tests.integration.gateway.conftest import register
from tests.support.redis_server import RedisServer

MODEL, VERSION = "echo", "1.0"
STREAM = keys.job_stream(MODEL, VERSION)

SMALL = b"s" * 100
LARGE = bytes(range(256)) * (2 * LARGE_JOB_BYTES // 256)
JOBS = pytest.mark.parametrize("job", [SMALL, LARGE], ids=["small", "large"])


@pytest.fixture
async def queue(redis_server: RedisServer) -> AsyncIterator[RedisJobQueue]:
    pipelined = PipelinedRedis(redis_server.url, timeout_s=5.0)
    try:
        yield RedisJobQueue(pipelined)
    finally:
        await pipelined.close()


async def add_worker(redis: aioredis.Redis) -> None:
    """What a starting worker does: create the stream's group and announce itself."""
    await redis.xgroup_create(STREAM, keys.JOB_GROUP, id="0", mkstream=True)
    await redis.hset(keys.workers(MODEL, VERSION), "w1", "{}")


async def queued(redis: aioredis.Redis) -> list[bytes]:
    entries: Any = await redis.xrange(STREAM)
    return [fields[b"m"] for _id, fields in entries]


@JOBS
async def test_an_admitted_job_is_queued_byte_exact(
    queue: RedisJobQueue, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client)
    await add_worker(redis_client)
    await queue.enqueue(MODEL, VERSION, job)
    await queue.enqueue(MODEL, VERSION, job + b"!")
    assert await queued(redis_client) == [job, job + b"!"]


@JOBS
async def test_an_unknown_or_retired_version_is_gone_and_no_stream_is_made(
    queue: RedisJobQueue, redis_client: aioredis.Redis, job: bytes
) -> None:
    with pytest.raises(VersionGone):
        await queue.enqueue(MODEL, VERSION, job)
    assert not await redis_client.exists(STREAM)

    await register(redis_client)
    await add_worker(redis_client)
    await redis_client.hset(keys.version_config(MODEL, VERSION), "state", "retired")
    with pytest.raises(VersionGone):
        await queue.enqueue(MODEL, VERSION, job)
    assert await queued(redis_client) == []


@JOBS
async def test_a_version_without_workers_refuses_and_no_stream_is_made(
    queue: RedisJobQueue, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client)
    with pytest.raises(SluiceError) as caught:
        await queue.enqueue(MODEL, VERSION, job)
    assert caught.value.code == ErrorCode.NO_WORKER
    assert not await redis_client.exists(STREAM)


@JOBS
async def test_a_full_queue_refuses_and_keeps_what_it_holds(
    queue: RedisJobQueue, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client, job_queue_size=2)
    await add_worker(redis_client)
    await queue.enqueue(MODEL, VERSION, job + b"1")
    await queue.enqueue(MODEL, VERSION, job + b"2")
    with pytest.raises(SluiceError) as caught:
        await queue.enqueue(MODEL, VERSION, job + b"3")
    assert caught.value.code == ErrorCode.QUEUE_FULL
    assert await queued(redis_client) == [job + b"1", job + b"2"]


@JOBS
async def test_a_refused_job_never_reaches_a_blocked_reader(
    queue: RedisJobQueue, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client, job_queue_size=0)
    await add_worker(redis_client)
    read = asyncio.ensure_future(
        redis_client.xreadgroup(keys.JOB_GROUP, "w1", {STREAM: ">"}, count=8, block=1000)
    )
    await asyncio.sleep(0.2)  # the reader is blocked on the stream
    with pytest.raises(SluiceError) as caught:
        await queue.enqueue(MODEL, VERSION, job)
    assert caught.value.code == ErrorCode.QUEUE_FULL
    response: Any = await read
    assert [entry for _stream, entries in response or () for entry in entries] == []
    assert await redis_client.xlen(STREAM) == 0


@JOBS
async def test_redis_out_of_memory_counts_as_a_full_queue(
    queue: RedisJobQueue, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client)
    await add_worker(redis_client)
    await redis_client.config_set("maxmemory", 1)
    with pytest.raises(SluiceError) as caught:
        await queue.enqueue(MODEL, VERSION, job)
    assert caught.value.code == ErrorCode.QUEUE_FULL
    await redis_client.config_set("maxmemory", 0)
    assert await queued(redis_client) == []
    # The connection is still in step: the next job goes through.
    await queue.enqueue(MODEL, VERSION, job)
    assert await queued(redis_client) == [job]
