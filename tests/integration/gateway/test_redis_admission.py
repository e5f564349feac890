"""The gateway's job admission against a real Redis, for both enqueue paths: small jobs through the
admission rule's check-and-add script, large ones by XADD checked in the same transaction (both are
sluice.admission's, whose whole table is tests/integration/shared/test_admission_rule.py). Each rule
must hold the same way on both; a Redis that does not answer is the seam's BrokerUnavailable."""

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.redis.pipelined import PipelinedRedis
from sluice_gateway.broker.redis_admission import LARGE_JOB_BYTES, RedisJobAdmission
from sluice_gateway.broker.seam import Admission, BrokerUnavailable

from tests.integration.gateway.conftest import register
from tests.support.redis_server import free_port

MODEL, VERSION = "echo", "1.0"
STREAM = keys.job_stream(MODEL, VERSION)

SMALL = b"s" * 100
LARGE = bytes(range(256)) * (2 * LARGE_JOB_BYTES // 256)
JOBS = pytest.mark.parametrize("job", [SMALL, LARGE], ids=["small", "large"])


@pytest.fixture
def queue(pipelined_redis: PipelinedRedis) -> RedisJobAdmission:
    return RedisJobAdmission(pipelined_redis)


async def add_worker(redis: aioredis.Redis) -> None:
    """What a starting worker does: create the stream's group and announce itself."""
    await redis.xgroup_create(STREAM, keys.JOB_GROUP, id="0", mkstream=True)
    await redis.hset(keys.workers(MODEL, VERSION), "w1", "{}")


async def queued(redis: aioredis.Redis) -> list[bytes]:
    entries: Any = await redis.xrange(STREAM)
    return [fields[b"m"] for _id, fields in entries]


@JOBS
async def test_an_admitted_job_is_queued_byte_exact(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client)
    await add_worker(redis_client)
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.ADMITTED
    assert await queue.enqueue(MODEL, VERSION, job + b"!") is Admission.ADMITTED
    assert await queued(redis_client) == [job, job + b"!"]


@JOBS
async def test_an_unknown_or_retired_version_is_gone_and_no_stream_is_made(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.VERSION_GONE
    assert not await redis_client.exists(STREAM)

    await register(redis_client)
    await add_worker(redis_client)
    await redis_client.hset(keys.version_config(MODEL, VERSION), "state", "retired")
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.VERSION_GONE
    assert await queued(redis_client) == []


@JOBS
async def test_a_version_that_scales_from_zero_admits_without_workers_and_asks_for_one(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client, min_workers=0, max_workers=2)
    async with redis_client.pubsub() as events:
        await events.subscribe(keys.EVENTS_CHANNEL)
        assert await events.get_message(timeout=5.0) is not None  # subscribed before the enqueue
        assert await queue.enqueue(MODEL, VERSION, job) is Admission.ADMITTED_COLD
        demand = await events.get_message(ignore_subscribe_messages=True, timeout=5.0)
    assert demand is not None
    assert b'"demand"' in demand["data"]
    assert STREAM.encode() in demand["data"]
    assert await queued(redis_client) == [job]
    await add_worker(redis_client)
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.ADMITTED, "a worker runs: no longer cold"


@JOBS
async def test_the_queue_bound_holds_for_a_version_without_workers(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client, min_workers=0, max_workers=1, job_queue_size=1)
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.ADMITTED_COLD
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.QUEUE_FULL
    assert await queued(redis_client) == [job]


@JOBS
async def test_a_version_without_workers_refuses_and_no_stream_is_made(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client)
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.NO_WORKER
    assert not await redis_client.exists(STREAM)


@JOBS
async def test_a_full_queue_refuses_and_keeps_what_it_holds(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client, job_queue_size=2)
    await add_worker(redis_client)
    await queue.enqueue(MODEL, VERSION, job + b"1")
    await queue.enqueue(MODEL, VERSION, job + b"2")
    assert await queue.enqueue(MODEL, VERSION, job + b"3") is Admission.QUEUE_FULL
    assert await queued(redis_client) == [job + b"1", job + b"2"]


@JOBS
async def test_a_refused_job_never_reaches_a_blocked_reader(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client, job_queue_size=0)
    await add_worker(redis_client)
    read = asyncio.ensure_future(
        redis_client.xreadgroup(keys.JOB_GROUP, "w1", {STREAM: ">"}, count=8, block=1000)
    )
    await asyncio.sleep(0.2)  # the reader is blocked on the stream
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.QUEUE_FULL
    response: Any = await read
    assert [entry for _stream, entries in response or () for entry in entries] == []
    assert await redis_client.xlen(STREAM) == 0


@JOBS
async def test_redis_out_of_memory_counts_as_a_full_queue(
    queue: RedisJobAdmission, redis_client: aioredis.Redis, job: bytes
) -> None:
    await register(redis_client)
    await add_worker(redis_client)
    await redis_client.config_set("maxmemory", 1)
    assert await queue.enqueue(MODEL, VERSION, job) is Admission.QUEUE_FULL
    await redis_client.config_set("maxmemory", 0)
    assert await queued(redis_client) == []
    # The connection is still in step: the next job goes through.
    await queue.enqueue(MODEL, VERSION, job)
    assert await queued(redis_client) == [job]


@JOBS
async def test_a_redis_that_does_not_answer_is_broker_unavailable(job: bytes) -> None:
    nobody = PipelinedRedis(f"redis://127.0.0.1:{free_port()}/0", timeout_s=1.0)
    try:
        with pytest.raises(BrokerUnavailable):
            await RedisJobAdmission(nobody).enqueue(MODEL, VERSION, job)
    finally:
        await nobody.close()


async def test_cancel_flags_outlive_the_call_by_their_ttl(
    queue: RedisJobAdmission, redis_client: aioredis.Redis
) -> None:
    queue.cancel(MODEL, VERSION, "job-1", 60_000)
    await queue.drain()
    assert await redis_client.get(keys.cancel(MODEL, VERSION, "job-1")) == b"1"
    assert 0 < await redis_client.pttl(keys.cancel(MODEL, VERSION, "job-1")) <= 60_000
