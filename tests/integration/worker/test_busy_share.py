"""A real worker reports how busy its handler is with every heartbeat, and the manager's autoscaling
signal, read from the same Redis, sums it: the measure that tells a worker kept busy by one job at a
time from an idle one when no job waits."""

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry.records import WorkerRecord
from sluice_manager.supervision.autoscale import Signal
from sluice_manager.supervision.worker_state import WorkerStateStore

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, register_sync
from tests.support import models
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer

MODEL, VERSION = "busy", "1.0"
CALL_S = 0.25


@pytest.fixture
def worker(module_redis: RedisServer, tmp_path: Path) -> Iterator[WorkerProcess]:
    register_sync(module_redis.url, models.sleeping_model(MODEL, VERSION, sleep_s=CALL_S), tmp_path)
    process = WorkerProcess(module_redis.url, MODEL, VERSION, tmp_path).start()
    try:
        process.wait_ready()
        yield process
    finally:
        process.send(signal.SIGTERM)
        assert process.wait() == 0, process.log()


async def load_signal(store: WorkerStateStore) -> Signal:
    return await store.signal(MODEL, VERSION, time.time(), await store.announced(MODEL, VERSION))


async def busy_share(client: "aioredis.Redis", worker: WorkerProcess) -> float:
    raw = await client.hget(keys.workers(MODEL, VERSION), worker.worker_id or "")
    return WorkerRecord.from_json(raw).busy_share if raw else -1.0


async def test_a_worker_reports_its_busy_share_and_the_signal_sums_it(
    client: "aioredis.Redis", worker: WorkerProcess
) -> None:
    store = WorkerStateStore(client)

    async def idle() -> bool:
        return await busy_share(client, worker) == 0.0

    await eventually(idle, timeout_s=10)
    replies = await ReplyStream(client).open()
    # One job at a time, back to back, for ~3 s: never more than one job in the stream, yet busy.
    calls = 12
    deadline = time.monotonic() + 30
    highest = 0.0
    for _ in range(calls):
        item = job(MODEL, VERSION, {"data": b"x"}, reply_to=replies.key)
        await enqueue(client, item)
        await replies.finals([item.job_id])
        highest = max(highest, (await load_signal(store)).busy)
        assert time.monotonic() < deadline
    assert highest >= 0.5, f"a worker busy most of the time reported {highest}"
    signal_now = await load_signal(store)
    assert signal_now.queued == 0, "no job waits: only the busy share shows the load"
    await eventually(idle, timeout_s=10)
    assert (await load_signal(store)).busy == 0.0
