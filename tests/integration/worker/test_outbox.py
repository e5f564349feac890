"""The worker's outbox against a real redis-server: batch sizes are counted locally and written at
most once a second (at once after a quiet second, the rest by a timer, all of it on stop)."""

import asyncio

import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.redis.pipelined import PipelinedRedis
from sluice_worker.broker import outbox as outbox_module
from sluice_worker.broker.outbox import Outbox

from tests.unit.worker.in_memory_source import delivery, job

# Far above the one second the outbox waits before writing what it counted meanwhile.
WRITTEN_WITHIN_S = 10.0


async def written(redis_client: "aioredis.Redis") -> dict[bytes | str, bytes | str]:
    return await redis_client.hgetall(keys.batch_sizes("m", "1"))


async def test_the_first_count_is_written_at_once_the_next_ones_by_the_timer(
    pipelined_redis: PipelinedRedis, redis_client: "aioredis.Redis"
) -> None:
    outbox = Outbox(pipelined_redis, "m", "1", "w1")
    [first] = outbox.batch_size(4)
    await first
    assert await written(redis_client) == {b"4": b"1"}
    assert [outbox.batch_size(4), outbox.batch_size(2), outbox.batch_size(4)] == [[], [], []]
    assert await written(redis_client) == {b"4": b"1"}
    for _ in range(int(WRITTEN_WITHIN_S / 0.05)):
        if await written(redis_client) == {b"4": b"3", b"2": b"1"}:
            break
        await asyncio.sleep(0.05)
    assert await written(redis_client) == {b"4": b"3", b"2": b"1"}


async def test_flush_writes_what_is_counted(
    pipelined_redis: PipelinedRedis, redis_client: "aioredis.Redis", monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "BATCH_SIZES_EVERY_S", 3600.0)  # the timer never fires here
    outbox = Outbox(pipelined_redis, "m", "1", "w1")
    await asyncio.gather(*outbox.batch_size(1))
    assert [outbox.batch_size(8), outbox.batch_size(8)] == [[], []]
    await outbox.flush()
    assert await written(redis_client) == {b"1": b"1", b"8": b"2"}


async def test_cancel_flags_are_read_in_one_command(
    pipelined_redis: PipelinedRedis, redis_client: "aioredis.Redis"
) -> None:
    outbox = Outbox(pipelined_redis, "m", "1", "w1")
    jobs = [delivery(job(job_id=f"j{n}")) for n in range(5)]
    await redis_client.set(keys.cancel("m", "1", "j1"), 1, px=60_000)
    await redis_client.set(keys.cancel("m", "1", "j4"), 1, px=60_000)
    before = (await redis_client.info("commandstats")).get("cmdstat_mget", {}).get("calls", 0)
    assert await outbox.cancelled(jobs) == [False, True, False, False, True]
    after = (await redis_client.info("commandstats")).get("cmdstat_mget", {}).get("calls", 0)
    assert after - before == 1
    assert await outbox.cancelled([]) == []
