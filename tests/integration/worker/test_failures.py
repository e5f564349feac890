"""Workers dying, hanging, exiting and stopping: every job still gets exactly one final answer."""

import asyncio
import dataclasses
import json
import shutil
import signal
import time
from pathlib import Path
from typing import cast

import pytest
import redis.asyncio as aioredis
from sluice import envelope
from sluice.errors import ErrorCode
from sluice.redis import keys
from sluice.registry.records import WorkerRecord, WorkerStatus

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, prediction, register
from tests.support import models
from tests.support.redis_server import RedisServer


async def _records(client: "aioredis.Redis", model: str) -> dict[str, WorkerRecord]:
    raw = cast(dict[bytes, bytes], await client.hgetall(keys.workers(model, "1.0")))
    return {key.decode(): WorkerRecord.from_json(value) for key, value in raw.items()}


async def _wait_pending(client: "aioredis.Redis", model: str, consumer: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = await client.xpending_range(
            keys.job_stream(model, "1.0"), keys.JOB_GROUP, "-", "+", 10, consumer
        )
        if rows:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{consumer} never took a job")


async def _consumers(client: "aioredis.Redis", model: str) -> set[str]:
    infos = await client.xinfo_consumers(keys.job_stream(model, "1.0"), keys.JOB_GROUP)
    return {info["name"].decode() for info in infos}


async def test_sys_exit_in_a_handler_answers_worker_died_and_exits_4(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    await register(client, models.exiting_model("exiting"), tmp_path)
    worker = WorkerProcess(module_redis.url, "exiting", "1.0", tmp_path, worker_id="9100").start()
    workers.append(worker)
    worker.wait_ready()
    replies = await ReplyStream(client).open()
    item = job("exiting", "1.0", {"data": b"x"}, reply_to=replies.key)
    await enqueue(client, item)
    reply = await replies.final(item.job_id)
    assert (reply.error_code, reply.status_code, reply.message) == (
        ErrorCode.WORKER_DIED.value,
        500,
        "Worker died.",
    )
    assert worker.wait() == 4, worker.log()
    assert await client.xlen(keys.job_stream("exiting", "1.0")) == 0
    assert "9100" not in await _records(client, "exiting")
    assert not await client.exists(keys.heartbeat("exiting", "1.0", "9100"))


async def test_response_timeout_answers_worker_died_and_exits_4(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    await register(client, models.sleeping_model("hanging", sleep_s=600), tmp_path, response_timeout_s=1)
    worker = WorkerProcess(module_redis.url, "hanging", "1.0", tmp_path, worker_id="9200").start()
    workers.append(worker)
    worker.wait_ready()
    replies = await ReplyStream(client).open()
    item = job("hanging", "1.0", {"data": b"x"}, reply_to=replies.key)
    started = time.monotonic()
    await enqueue(client, item)
    reply = await replies.final(item.job_id, timeout_s=15)
    assert (reply.error_code, reply.status_code, reply.message) == (
        ErrorCode.WORKER_DIED.value,
        500,
        "Worker died.",
    )
    # The handler thread is still sleeping; the process leaves anyway.
    assert worker.wait(timeout_s=15) == 4, worker.log()
    assert time.monotonic() - started < 15
    assert await client.xlen(keys.job_stream("hanging", "1.0")) == 0
    assert "9200" not in await _records(client, "hanging")


async def test_jobs_of_a_killed_worker_are_reclaimed_and_answered_once(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    await register(client, models.sleeping_model("slow", sleep_s=0.4), tmp_path, batch_size=1)
    doomed = WorkerProcess(module_redis.url, "slow", "1.0", tmp_path, worker_id="9301").start()
    survivor = WorkerProcess(module_redis.url, "slow", "1.0", tmp_path, worker_id="9302").start()
    workers += [doomed, survivor]
    doomed.wait_ready()
    survivor.wait_ready()
    replies = await ReplyStream(client).open()
    items = [job("slow", "1.0", {"data": f"{i}".encode()}, reply_to=replies.key) for i in range(6)]
    await enqueue(client, *items)
    await _wait_pending(client, "slow", "9301")
    doomed.send(signal.SIGKILL)
    assert doomed.wait() == -signal.SIGKILL

    got = await replies.finals([i.job_id for i in items], timeout_s=30)
    for i, item in enumerate(items):
        finals = [r for r in got[item.job_id] if r.final]
        assert len(finals) == 1, got[item.job_id]
        assert (finals[0].error_code, prediction(finals[0])) == ("", f"{i}".encode())
    assert any(r.attempt == 2 for r in replies.received), "some job should have been redelivered"
    assert await replies.more(1.0) == []
    # The dead worker's consumer and record are cleaned up by the survivor.
    assert "9301" not in await _consumers(client, "slow")
    assert set(await _records(client, "slow")) == {"9302"}


async def test_a_job_past_max_deliveries_is_dead_lettered(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    model = "poisoned"
    await register(client, models.echo_model(model), tmp_path, max_deliveries=2)
    stream = keys.job_stream(model, "1.0")
    await client.xgroup_create(stream, keys.JOB_GROUP, id="0", mkstream=True)
    replies = await ReplyStream(client).open()
    poison = job(model, "1.0", {"data": b"poison"}, reply_to=replies.key)
    second_chance = job(model, "1.0", {"data": b"again"}, reply_to=replies.key)
    poison_id, _ = await enqueue(client, poison, second_chance)
    # A worker "ghost" took both jobs and died; the poison job had already been claimed once before.
    await client.xreadgroup(keys.JOB_GROUP, "ghost", {stream: ">"}, count=2)
    await client.xclaim(stream, keys.JOB_GROUP, "ghost", 0, [poison_id])
    ghost = WorkerRecord(worker_id="ghost", pid=1, host="gone", status=WorkerStatus.READY, started_unix_ms=0)
    phantom = dataclasses.replace(ghost, worker_id="phantom")
    await client.hset(
        keys.workers(model, "1.0"), mapping={"ghost": ghost.to_json(), "phantom": phantom.to_json()}
    )

    worker = WorkerProcess(module_redis.url, model, "1.0", tmp_path, worker_id="9400").start()
    workers.append(worker)
    worker.wait_ready()
    got = await replies.finals([poison.job_id, second_chance.job_id])

    (died,) = got[poison.job_id]
    assert (died.error_code, died.status_code, died.message, died.attempt) == (
        ErrorCode.WORKER_DIED.value, 500, "Worker died.", 3,
    )  # fmt: skip
    (ran,) = got[second_chance.job_id]
    assert (ran.error_code, prediction(ran), ran.attempt) == ("", b"again", 2)

    (letter,) = cast(
        list[tuple[bytes, dict[bytes, bytes]]], await client.xrange(keys.dead_letters(model, "1.0"))
    )
    fields = letter[1]
    assert envelope.decode_job(fields[envelope.FIELD]).job_id == poison.job_id
    assert (fields[b"reason"], fields[b"deliveries"]) == (b"max deliveries exceeded", b"3")
    assert await client.xlen(stream) == 0
    assert "ghost" not in await _consumers(client, model)
    assert set(await _records(client, model)) == {"9400"}


async def test_sigterm_finishes_the_job_in_hand_then_leaves(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    model = "draining"
    await register(client, models.sleeping_model(model, sleep_s=1.0), tmp_path)
    worker = WorkerProcess(module_redis.url, model, "1.0", tmp_path, worker_id="9700").start()
    workers.append(worker)
    worker.wait_ready()
    replies = await ReplyStream(client).open()
    item = job(model, "1.0", {"data": b"keep me"}, reply_to=replies.key)
    await enqueue(client, item)
    await _wait_pending(client, model, "9700")
    worker.send(signal.SIGTERM)
    reply = await replies.final(item.job_id)
    assert (reply.error_code, prediction(reply)) == ("", b"keep me")
    assert worker.wait() == 0, worker.log()
    assert await _records(client, model) == {}
    assert not await client.exists(keys.heartbeat(model, "1.0", "9700"))
    assert "9700" not in await _consumers(client, model)
    assert await client.xlen(keys.job_stream(model, "1.0")) == 0


async def test_a_handler_that_fails_to_load_exits_3(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    broken = models.ModelSpec(
        name="broken", handler="handler.py", files={"handler.py": "raise ImportError('nope')\n"}
    )
    await register(client, broken, tmp_path)
    worker = WorkerProcess(module_redis.url, "broken", "1.0", tmp_path).start()
    workers.append(worker)
    assert worker.wait() == 3, worker.log()
    assert "handler failed to load" in worker.log()
    assert await _records(client, "broken") == {}


async def test_a_missing_model_folder_exits_3_with_a_clear_error(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    record = await register(client, models.ModelSpec(name="gone", handler="handler.py"), tmp_path)
    shutil.rmtree(record.model_dir)  # a registration that outlived its models folder
    worker = WorkerProcess(module_redis.url, "gone", "1.0", tmp_path).start()
    workers.append(worker)
    assert worker.wait() == 3, worker.log()
    assert "cannot enter the model folder" in worker.log()
    assert "Traceback" not in worker.log()


async def test_worker_waits_for_its_record_numbers_itself_and_runs_on_cpu(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    # Started before the version is registered (a compose-scaled worker), with a GPU id on a CPU machine.
    worker = WorkerProcess(redis_server.url, "late", "1.0", tmp_path, args=["--gpu-id", "0"]).start()
    workers.append(worker)
    await asyncio.sleep(1.0)
    assert worker.process is not None
    assert worker.process.poll() is None
    await register(redis_client, models.echo_model("late"), tmp_path)
    record = worker.wait_ready()
    assert (record.worker_id, record.device, record.gpu) == ("9000", "cpu", False)
    replies = await ReplyStream(redis_client).open()
    item = job("late", "1.0", {"kind": b"context"}, reply_to=replies.key)
    await enqueue(redis_client, item)
    context = json.loads(prediction(await replies.final(item.job_id)))
    assert context["system_properties"]["gpu_id"] is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_signal_during_startup_exits_0(
    module_redis: RedisServer, tmp_path: Path, workers: list[WorkerProcess], sig: signal.Signals
) -> None:
    worker = WorkerProcess(module_redis.url, "never-registered", "1.0", tmp_path).start()
    workers.append(worker)
    deadline = time.monotonic() + 30
    while "waiting for the version record" not in worker.log():
        assert time.monotonic() < deadline, worker.log()
        await asyncio.sleep(0.05)
    worker.send(sig)
    assert worker.wait() == 0, worker.log()


async def test_entries_this_worker_owns_but_never_saw_are_run(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    """An XREADGROUP reply lost in transit (or a restart under the same id) leaves entries pending under
    a live consumer that does not hold them: the worker's own claim scan finds and runs them."""
    model = "orphans"
    await register(client, models.echo_model(model), tmp_path)
    stream = keys.job_stream(model, "1.0")
    await client.xgroup_create(stream, keys.JOB_GROUP, id="0", mkstream=True)
    replies = await ReplyStream(client).open()
    leftover = job(model, "1.0", {"data": b"from a past life"}, reply_to=replies.key)
    await enqueue(client, leftover)
    await client.xreadgroup(keys.JOB_GROUP, "9910", {stream: ">"}, count=1)

    worker = WorkerProcess(module_redis.url, model, "1.0", tmp_path, worker_id="9910").start()
    workers.append(worker)
    worker.wait_ready()
    assert prediction(await replies.final(leftover.job_id)) == b"from a past life"

    # Deliver an entry to the worker's consumer behind its back: XADD and XREADGROUP in one transaction,
    # so the worker's own blocked read finds nothing new.
    lost = job(model, "1.0", {"data": b"lost in transit"}, reply_to=replies.key)
    async with client.pipeline(transaction=True) as pipe:
        pipe.xadd(stream, {envelope.FIELD: envelope.encode_job(lost)})
        pipe.xreadgroup(keys.JOB_GROUP, "9910", {stream: ">"}, count=1)
        _, delivered = await pipe.execute()
    assert delivered
    reply = await replies.final(lost.job_id)
    assert (prediction(reply), reply.attempt) == (b"lost in transit", 2)


async def test_an_inline_call_longer_than_the_heartbeat_ttl_keeps_its_job(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    # The handler runs inline and stops its worker's loop for three heartbeat TTLs: the guard thread
    # keeps the heartbeat, so the idle peer never takes the job for a dead worker's and runs it again.
    record = await register(client, models.batch_recorder_model("long", sleep_s=2.5), tmp_path, batch_size=1)
    pair = [
        WorkerProcess(module_redis.url, "long", "1.0", tmp_path, worker_id=worker_id).start()
        for worker_id in ("9401", "9402")
    ]
    workers += pair
    for worker in pair:
        worker.wait_ready()
    replies = await ReplyStream(client).open()
    item = job("long", "1.0", {"data": b"once"}, reply_to=replies.key)
    await enqueue(client, item)
    assert prediction(await replies.final(item.job_id, timeout_s=20)) == b"once"
    assert await replies.more(1.0) == []
    batches = Path(record.model_dir) / "batches.jsonl"
    runs = [line for line in batches.read_text().splitlines() if item.job_id in line]
    assert len(runs) == 1, runs
