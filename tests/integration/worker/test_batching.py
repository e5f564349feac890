"""Batching as the handler sees it: the batch sizes it recorded, not timings."""

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sluice.errors import ErrorCode
from sluice.redis import keys
from sluice.registry.records import BatchPolicy, VersionRecord

from tests.integration.worker.harness import (
    ReplyStream,
    WorkerProcess,
    enqueue,
    job,
    prediction,
    register_sync,
)
from tests.support import models
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer

MODEL = "recorder"
FILL_DELAY_MS = 1500
EAGER_DELAY_MS = 20_000
SLOW_BATCH_S = 1.5


@pytest.fixture(scope="module")
def versions(
    module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, VersionRecord]]:
    """Version "fill" (batch 4, TorchServe's rule), version "eager" (batch 4, never waits), version
    "slow" (eager, every batch takes SLOW_BATCH_S) and "slow-thread", the same on the torch thread
    (the others run their handler inline, the default)."""
    root = tmp_path_factory.mktemp("models")
    records = {
        "fill": register_sync(
            module_redis.url, models.batch_recorder_model(MODEL, "fill"), root,
            batch_size=4, max_batch_delay_ms=FILL_DELAY_MS,
        ),
        "eager": register_sync(
            module_redis.url, models.batch_recorder_model(MODEL, "eager"), root,
            batch_size=4, max_batch_delay_ms=EAGER_DELAY_MS, batch_policy=BatchPolicy.EAGER,
        ),
        "slow": register_sync(
            module_redis.url, models.batch_recorder_model(MODEL, "slow", sleep_s=SLOW_BATCH_S), root,
            batch_size=4, max_batch_delay_ms=EAGER_DELAY_MS, batch_policy=BatchPolicy.EAGER,
        ),
        "slow-thread": register_sync(
            module_redis.url, models.batch_recorder_model(MODEL, "slow-thread", sleep_s=SLOW_BATCH_S), root,
            batch_size=4, max_batch_delay_ms=EAGER_DELAY_MS, batch_policy=BatchPolicy.EAGER,
        ),
    }  # fmt: skip
    workers = [
        WorkerProcess(
            module_redis.url, MODEL, version, root,
            env={"SLUICE_INLINE_HANDLER": "false"} if version == "slow-thread" else None,
        ).start()
        for version in records
    ]  # fmt: skip
    try:
        for worker in workers:
            worker.wait_ready()
        yield records
    finally:
        for worker in workers:
            worker.send(signal.SIGTERM)
        for worker in workers:
            assert worker.wait() == 0, worker.log()


def recorded_batches(record: VersionRecord, job_ids: list[str]) -> list[list[str]]:
    """The batches (request ids, in call order) the handler got that contain any of ``job_ids``."""
    path = Path(record.model_dir) / "batches.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    batches = [json.loads(line)["request_ids"] for line in lines]
    return [batch for batch in batches if set(batch) & set(job_ids)]


async def _send(
    client: "aioredis.Redis", version: str, count: int, **kwargs: object
) -> tuple[list[str], ReplyStream]:
    replies = await ReplyStream(client).open()
    jobs = [
        job(MODEL, version, {"data": f"row-{i}".encode()}, reply_to=replies.key, **kwargs)  # type: ignore[arg-type]
        for i in range(count)
    ]
    await enqueue(client, *jobs)
    return [j.job_id for j in jobs], replies


async def test_fill_runs_a_full_batch_then_the_rest_after_the_delay(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    ids, replies = await _send(client, "fill", 5)
    got = await replies.finals(ids)
    assert [prediction(got[job_id][0]) for job_id in ids] == [f"row-{i}".encode() for i in range(5)]
    assert recorded_batches(versions["fill"], ids) == [ids[:4], ids[4:]]


async def test_fill_runs_a_partial_batch_once_the_delay_passed(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    ids, replies = await _send(client, "fill", 2)
    await replies.finals(ids)
    assert recorded_batches(versions["fill"], ids) == [ids]


async def test_eager_runs_what_is_queued_without_waiting(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    started = time.monotonic()
    ids, replies = await _send(client, "eager", 1)
    await replies.finals(ids)
    # The version's max_batch_delay is 20 s: an answer well before it means nobody waited for it.
    assert time.monotonic() - started < EAGER_DELAY_MS / 1000 / 2
    assert recorded_batches(versions["eager"], ids) == [ids]


async def test_eager_batches_what_is_queued_together(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    ids, replies = await _send(client, "eager", 3)
    await replies.finals(ids)
    assert recorded_batches(versions["eager"], ids) == [ids]


async def test_on_the_torch_thread_jobs_arriving_while_a_batch_runs_are_read_ahead(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    first, replies = await _send(client, "slow-thread", 1)
    await eventually(lambda: recorded_batches(versions["slow-thread"], first) == [first], timeout_s=10)
    later, later_replies = await _send(client, "slow-thread", 2)
    stream = keys.job_stream(MODEL, "slow-thread")

    async def all_three_delivered() -> bool:
        return int((await client.xpending(stream, keys.JOB_GROUP))["pending"]) == 3

    # The later two reach the worker while the first batch still runs. (Before the read ahead, the
    # next read went out after the first job's ack: never three delivered and unacked at once.)
    await eventually(all_three_delivered, timeout_s=10)
    assert recorded_batches(versions["slow-thread"], first + later) == [first]
    await replies.finals(first)
    await later_replies.finals(later)
    assert recorded_batches(versions["slow-thread"], first + later) == [first, later]


async def test_inline_jobs_waiting_when_a_batch_starts_are_read_ahead(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    # The loop stops while an inline handler runs: what it reads ahead is what waits in the stream
    # when the call starts, beyond the call's batch.
    first, replies = await _send(client, "slow", 1)
    await eventually(lambda: recorded_batches(versions["slow"], first) == [first], timeout_s=10)
    later, later_replies = await _send(client, "slow", 5)
    stream = keys.job_stream(MODEL, "slow")
    await replies.finals(first)
    await eventually(lambda: recorded_batches(versions["slow"], later) == [later[:4]], timeout_s=10)

    async def all_five_delivered() -> bool:
        return int((await client.xpending(stream, keys.JOB_GROUP))["pending"]) == 5

    # The batch of four runs, and the fifth job is already delivered to the worker meanwhile.
    await eventually(all_five_delivered, timeout_s=SLOW_BATCH_S)
    assert recorded_batches(versions["slow"], later) == [later[:4]]
    await later_replies.finals(later)
    assert recorded_batches(versions["slow"], later) == [later[:4], later[4:]]


async def test_a_streaming_job_runs_alone(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    replies = await ReplyStream(client).open()
    plain = [job(MODEL, "eager", {"data": b"p"}, reply_to=replies.key) for _ in range(2)]
    streaming = job(MODEL, "eager", {"data": b"s"}, reply_to=replies.key, streaming=True)
    await enqueue(client, plain[0], streaming, plain[1])
    await replies.finals([plain[0].job_id, plain[1].job_id, streaming.job_id])
    batches = recorded_batches(versions["eager"], [plain[0].job_id, streaming.job_id])
    assert batches == [[plain[0].job_id, plain[1].job_id], [streaming.job_id]]


async def test_expired_and_cancelled_jobs_are_skipped(
    versions: dict[str, VersionRecord], client: "aioredis.Redis"
) -> None:
    replies = await ReplyStream(client).open()
    expired = job(
        MODEL, "eager", {"data": b"late"}, reply_to=replies.key, deadline_unix_ms=int(time.time() * 1000) - 1
    )
    # The worker looks for cancel flags of jobs that waited (CANCEL_CHECK_AFTER_MS) only: a fresh job
    # runs whatever its flag says. (Stamped a minute ahead, the fresh job stays fresh however long a
    # loaded machine takes to hand it to the worker.)
    cancelled = job(MODEL, "eager", {"data": b"gone"}, reply_to=replies.key, queued_ms=5_000)
    fresh = job(MODEL, "eager", {"data": b"fresh"}, reply_to=replies.key, queued_ms=-60_000)
    live = job(
        MODEL,
        "eager",
        {"data": b"ok"},
        reply_to=replies.key,
        deadline_unix_ms=int(time.time() * 1000) + 60_000,
    )
    for flagged in (cancelled, fresh):
        await client.set(keys.cancel(MODEL, "eager", flagged.job_id), 1, px=60_000)
    await enqueue(client, expired, cancelled, fresh, live)
    got = await replies.finals([expired.job_id, cancelled.job_id, fresh.job_id, live.job_id])
    assert [r.error_code for r in got[expired.job_id]] == [ErrorCode.DEADLINE_EXCEEDED.value]
    assert [r.error_code for r in got[cancelled.job_id]] == [ErrorCode.CANCELLED.value]
    assert [prediction(r) for r in got[fresh.job_id]] == [b"fresh"]
    assert [prediction(r) for r in got[live.job_id]] == [b"ok"]
    # Only the jobs that ran reached the handler; the skipped ones were acked and deleted all the same.
    every = [expired.job_id, cancelled.job_id, fresh.job_id, live.job_id]
    assert recorded_batches(versions["eager"], every) == [[fresh.job_id, live.job_id]]
    assert await client.xlen(keys.job_stream(MODEL, "eager")) == 0
