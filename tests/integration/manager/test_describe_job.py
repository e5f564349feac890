"""DescribeModel's customized metadata admits its job by the one admission rule (sluice.admission), as
inference does: a full queue is QUEUE_FULL (TorchServe's text, as for inference), a version without
workers NO_WORKER, and a version that scales from zero takes the job cold and asks for a worker. The
rule's whole table is tests/integration/shared/test_admission_rule.py."""

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis
from sluice import envelope
from sluice.envelope import Reply, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore
from sluice_manager.api.describe_job import DescribeJobs

from tests.support.redis_server import RedisServer

MODEL, VERSION = "echo", "1.0"
STREAM = keys.job_stream(MODEL, VERSION)
REFUSED = (
    f'Model "{MODEL}" has no worker to serve describe request. Please use scale workers API to add workers.'
)


async def registered(redis: "aioredis.Redis", **fields: Any) -> VersionRecord:
    record = VersionRecord(
        model_name=MODEL, version=VERSION, model_url="echo.mar", model_dir="/none", handler="h", **fields
    )
    await RegistryStore(redis).add(record, make_default=True)
    return record


async def add_worker(redis: "aioredis.Redis") -> None:
    await redis.hset(keys.workers(MODEL, VERSION), "w1", "{}")


@pytest.fixture
def describe(redis_client: "aioredis.Redis", redis_server: RedisServer) -> DescribeJobs:
    return DescribeJobs(redis_client, redis_server.url)


async def test_a_full_queue_is_queue_full_and_keeps_what_it_holds(
    describe: DescribeJobs, redis_client: "aioredis.Redis"
) -> None:
    record = await registered(redis_client, job_queue_size=1)
    await add_worker(redis_client)
    await redis_client.xadd(STREAM, {"m": b"queued"})
    with pytest.raises(SluiceError) as refused:
        await describe.customized(record, {}, b"")
    assert (refused.value.code, refused.value.message) == (ErrorCode.QUEUE_FULL, REFUSED)
    assert await redis_client.xlen(STREAM) == 1


async def test_a_version_without_workers_is_no_worker(
    describe: DescribeJobs, redis_client: "aioredis.Redis"
) -> None:
    record = await registered(redis_client)
    with pytest.raises(SluiceError) as refused:
        await describe.customized(record, {}, b"")
    assert (refused.value.code, refused.value.message) == (ErrorCode.NO_WORKER, REFUSED)
    assert not await redis_client.exists(STREAM)


async def test_a_version_that_scales_from_zero_takes_the_job_cold_and_asks_for_a_worker(
    describe: DescribeJobs, redis_client: "aioredis.Redis"
) -> None:
    record = await registered(redis_client, min_workers=0, max_workers=1, response_timeout_s=10)
    async with redis_client.pubsub() as events:
        await events.subscribe(keys.EVENTS_CHANNEL)
        assert await events.get_message(timeout=5.0) is not None
        call = asyncio.create_task(describe.customized(record, {"x-test": "1"}, b"{}"))
        demand = await events.get_message(ignore_subscribe_messages=True, timeout=5.0)
    assert demand is not None
    assert json.loads(demand["data"]) == {"kind": "demand", "stream": STREAM}
    # The worker that starts reads the job and answers it.
    entries: Any = await redis_client.xrange(STREAM)
    [(_entry, fields)] = entries
    job = envelope.decode_job(fields[envelope.FIELD])
    assert (job.protocol, job.streaming, dict(job.headers)) == (WireProtocol.DESCRIBE, True, {"x-test": "1"})
    answer = Reply(job_id=job.job_id, final=True, payload=b'{"description": "echo"}')
    await redis_client.xadd(job.reply_to, {envelope.FIELD: envelope.encode_reply(answer)})
    assert await asyncio.wait_for(call, timeout=10) == {"description": "echo"}
