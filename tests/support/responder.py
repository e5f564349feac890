"""A scripted stand-in for a worker, written to the Redis contract in docs/design.md and nothing else.

It announces itself like a worker (``WorkerRecord`` READY in the version's ``workers`` hash plus a
``hb:<id>`` key with a TTL), reads the version's job stream through the ``workers`` group, skips
expired and cancelled jobs, XADDs each reply (``NOMKSTREAM``) to ``job.reply_to`` and only then acks
the job (``XACK`` + ``XDEL``). What it answers is a script: an async generator ``Job -> Reply``; a
script that yields a sequence of replies has them written in one entry, one ``m`` field each, in
order (as a worker publishes one iteration's chunks). Jobs are handled concurrently so a test can
hold one while others run.
"""

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sluice.envelope import FIELD, Job, Reply, decode_job, encode_reply
from sluice.errors import ErrorCode
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.redis import keys
from sluice.redis.client import connect
from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

# A script yields replies, or sequences of replies that go out in one stream entry.
Script = Callable[[Job], AsyncIterator[Reply | Sequence[Reply]]]
T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def announce_worker(
    redis: "aioredis.Redis", model: str, version: str, worker_id: str, heartbeat_ttl_ms: int
) -> None:
    """What a worker does once it is READY: its record in the version's workers hash, and a heartbeat."""
    record = WorkerRecord(
        worker_id=worker_id,
        pid=os.getpid(),
        host=socket.gethostname(),
        status=WorkerStatus.READY,
        started_unix_ms=now_ms(),
    )
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(keys.workers(model, version), worker_id, record.to_json())
        pipe.set(keys.heartbeat(model, version, worker_id), b"1", px=heartbeat_ttl_ms)
        await pipe.execute()


def ok(job: Job, prediction: bytes, *, seq: int = 0, final: bool = True, attempt: int = 1) -> Reply:
    """A success reply: ``payload`` is a serialized ``PredictionResponse{prediction}``."""
    payload = PredictionResponse(prediction=prediction).SerializeToString()
    return Reply(job_id=job.job_id, seq=seq, final=final, status_code=200, payload=payload, attempt=attempt)


def failure(job: Job, code: ErrorCode, status: int, message: str, *, seq: int = 0, attempt: int = 1) -> Reply:
    return Reply(
        job_id=job.job_id,
        seq=seq,
        final=True,
        status_code=status,
        message=message,
        error_code=code.name,
        attempt=attempt,
    )


def request_of(job: Job) -> PredictionsRequest:
    return PredictionsRequest.FromString(job.request)


async def echo(job: Job) -> AsyncIterator[Reply]:
    """Answers with the request's ``data`` input."""
    yield ok(job, request_of(job).input.get("data", b""))


def fixed(*make: Callable[[Job], Reply]) -> Script:
    """Answers every job with the replies built by ``make``, in order."""

    async def script(job: Job) -> AsyncIterator[Reply]:
        for build in make:
            yield build(job)

    return script


class Responder:
    def __init__(
        self,
        redis_url: str,
        model: str,
        version: str,
        script: Script = echo,
        *,
        worker_id: str = "9000",
        heartbeat_ttl_ms: int = 30_000,
        block_ms: int = 100,
    ) -> None:
        self.redis: aioredis.Redis = connect(redis_url)
        self.model = model
        self.version = version
        self.script = script
        self.worker_id = worker_id
        self.heartbeat_ttl_ms = heartbeat_ttl_ms
        self.block_ms = block_ms
        self.jobs: list[Job] = []
        # Every job read, in stream order (``jobs`` is in the order the concurrent handlers got to them).
        self.queued: list[Job] = []
        self.skipped: list[Job] = []
        self.received = asyncio.Event()
        self._stream = keys.job_stream(model, version)
        self._loop_task: asyncio.Task[None] | None = None
        self._job_tasks: set[asyncio.Task[None]] = set()

    async def announce(self) -> None:
        await announce_worker(self.redis, self.model, self.version, self.worker_id, self.heartbeat_ttl_ms)

    async def start(self) -> "Responder":
        await self._create_group()
        await self.announce()
        self._loop_task = asyncio.create_task(self._run())
        return self

    async def stop(self) -> None:
        for task in [self._loop_task, *self._job_tasks]:
            if task is not None:
                # redis-py can turn a cancellation inside XREADGROUP into a RedisError the read loop
                # survives: cancel until the task is done.
                await cancel_and_wait(task)
        with contextlib.suppress(RedisError):
            await self.redis.hdel(keys.workers(self.model, self.version), self.worker_id)
            await self.redis.delete(keys.heartbeat(self.model, self.version, self.worker_id))
        await self.redis.aclose()

    async def _create_group(self) -> None:
        try:
            await self.redis.xgroup_create(self._stream, keys.JOB_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _run(self) -> None:
        while True:
            try:
                result = await self.redis.xreadgroup(
                    keys.JOB_GROUP, self.worker_id, {self._stream: ">"}, count=16, block=self.block_ms
                )
            except ResponseError as exc:
                if "NOGROUP" in str(exc):  # Redis lost its data
                    await self._create_group()
                    continue
                raise
            except RedisError:
                await asyncio.sleep(0.05)
                continue
            read: Any = result or []
            for _stream, entries in read:
                for entry_id, fields in entries:
                    job = decode_job(fields[FIELD])
                    self.queued.append(job)
                    task = asyncio.create_task(self._handle(entry_id, job))
                    self._job_tasks.add(task)
                    task.add_done_callback(self._job_tasks.discard)

    async def _handle(self, entry_id: bytes, job: Job) -> None:
        cancel_key = keys.cancel(self.model, self.version, job.job_id)
        cancelled = await self._retrying(lambda: self.redis.exists(cancel_key))
        if cancelled or (job.deadline_unix_ms and job.deadline_unix_ms < now_ms()):
            self.skipped.append(job)
        else:
            self.jobs.append(job)
            self.received.set()
            async for reply in self.script(job):
                await self.reply(job, reply)
        await self._ack(entry_id)

    async def reply(self, job: Job, reply: Reply | Sequence[Reply]) -> None:
        """One entry on the job's reply stream: the reply, or each of the replies in order."""
        await write_replies(self.redis, job.reply_to, [reply] if isinstance(reply, Reply) else reply)

    async def _ack(self, entry_id: bytes) -> None:
        async def ack() -> Any:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(self._stream, keys.JOB_GROUP, entry_id)
                pipe.xdel(self._stream, entry_id)
                return await pipe.execute()

        await self._retrying(ack)

    @staticmethod
    async def _retrying(command: Callable[[], Awaitable[T]], attempts: int = 40) -> T:
        """Reconnect with backoff, as workers do across a Redis restart."""
        for _ in range(attempts - 1):
            try:
                return await command()
            except (RedisConnectionError, RedisTimeoutError):
                await asyncio.sleep(0.05)
        return await command()

    async def wait_for_jobs(self, count: int, timeout_s: float = 5.0) -> list[Job]:
        async with asyncio.timeout(timeout_s):
            while len(self.jobs) < count:
                self.received.clear()
                await self.received.wait()
        return self.jobs


async def write_replies(redis: "aioredis.Redis", reply_to: str, replies: Sequence[Reply]) -> None:
    """``XADD <reply_to> NOMKSTREAM * m <Reply> [m <Reply> ...]``, retried across a Redis restart
    (redis-py's ``xadd`` takes a dict: it cannot repeat a field)."""
    fields = [part for reply in replies for part in (FIELD, encode_reply(reply))]
    command = ("XADD", reply_to, "NOMKSTREAM", "*", *fields)
    await Responder._retrying(lambda: redis.execute_command(*command))  # type: ignore[no-untyped-call]
