"""Redis restarts (AOF on) under a running worker: it reconnects and serves again, and the job it
held during the outage is answered once Redis is back."""

import asyncio
import signal
import time
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from sluice.redis import keys

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, prediction, register
from tests.support import models
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer

MODEL = "survivor"


async def _until_back(client: "aioredis.Redis", timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await client.ping()
            return
        except (RedisConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_service_resumes_after_a_redis_restart(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    await register(redis_client, models.sleeping_model(MODEL, sleep_s=1.5), tmp_path)
    worker = WorkerProcess(redis_server.url, MODEL, "1.0", tmp_path, worker_id="9800").start()
    workers.append(worker)
    worker.wait_ready()
    replies = await ReplyStream(redis_client).open()
    in_flight = job(MODEL, "1.0", {"data": b"during", "sleep_s": b"1.5"}, reply_to=replies.key)
    await enqueue(redis_client, in_flight)
    await asyncio.sleep(0.5)  # the worker holds the job, its handler is sleeping

    await asyncio.to_thread(redis_server.restart, 1.0)
    await _until_back(redis_client)

    reply = await replies.final(in_flight.job_id, timeout_s=20)
    assert (reply.error_code, prediction(reply)) == ("", b"during")
    after = job(MODEL, "1.0", {"data": b"after", "sleep_s": b"0"}, reply_to=replies.key)
    await enqueue(redis_client, after)
    assert prediction(await replies.final(after.job_id, timeout_s=20)) == b"after"
    assert worker.process is not None
    assert worker.process.poll() is None
    # The heartbeat (TTL 3 s) may have lapsed during the outage; the next beat after Redis is back
    # announces the worker again.
    await eventually(lambda: redis_client.exists(keys.heartbeat(MODEL, "1.0", "9800")), timeout_s=3.0)
    assert await redis_client.hexists(keys.workers(MODEL, "1.0"), "9800")


async def test_sigterm_while_redis_is_gone_still_ends_the_worker(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    # Its manager and its Redis are gone for good: the worker's last steps (withdraw, leave the
    # group) are best effort, and SIGTERM still ends it instead of waiting for a Redis that never comes.
    await register(redis_client, models.sleeping_model("leaver", sleep_s=0), tmp_path)
    worker = WorkerProcess(redis_server.url, "leaver", "1.0", tmp_path, worker_id="9810").start()
    workers.append(worker)
    worker.wait_ready()
    await redis_client.aclose()
    redis_server.kill()
    worker.send(signal.SIGTERM)
    assert worker.wait(timeout_s=30) == 0, worker.log()
