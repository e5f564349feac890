"""Admission of jobs to a model version's job stream (one Lua script, one round trip) and cancel flags.

Both run on the gateway's pipelined hot-path connection: the enqueues of all the calls that arrived
in one event-loop turn reach Redis in one write. EVALSHA falls back to EVAL after a Redis restart.
"""

import asyncio
import hashlib
from pathlib import Path
from typing import Protocol

from sluice import keys
from sluice.errors import ErrorCode, SluiceError, no_worker_message
from sluice.log import get_logger
from sluice.pipelined_redis import PipelinedRedis
from sluice.redis_errors import RedisError, ReplyError

from sluice_gateway.jobs import UNAVAILABLE_MESSAGE

log = get_logger(__name__)

_SCRIPT = Path(__file__).with_name("enqueue.lua").read_text()
_SCRIPT_SHA = hashlib.sha1(_SCRIPT.encode()).hexdigest()

NOT_FOUND = b"NOT_FOUND"
NO_WORKER = b"NO_WORKER"
QUEUE_FULL = b"QUEUE_FULL"


class VersionGone(Exception):
    """The version is not (or no longer) active: the caller turns it into the right not-found error."""


class JobQueue(Protocol):
    async def enqueue(self, model: str, version: str, job: bytes) -> None: ...

    def cancel(self, model: str, version: str, job_id: str, ttl_ms: int) -> None: ...


class RedisJobQueue:
    def __init__(self, redis: PipelinedRedis) -> None:
        self._redis = redis
        # Fire-and-forget tasks are referenced until done (the loop keeps only weak references).
        self._background: set[asyncio.Task[None]] = set()

    async def enqueue(self, model: str, version: str, job: bytes) -> None:
        """Add ``job`` to the version's stream, or raise: VersionGone, NO_WORKER, QUEUE_FULL,
        UNAVAILABLE (Redis unreachable)."""
        script_keys = [
            keys.version_config(model, version),
            keys.workers(model, version),
            keys.job_stream(model, version),
        ]
        try:
            outcome = await self._redis.evalsha(_SCRIPT_SHA, _SCRIPT, script_keys, [job])
        except ReplyError as exc:
            if str(exc).startswith("OOM"):  # maxmemory reached: as good as a full queue
                raise SluiceError(ErrorCode.QUEUE_FULL, no_worker_message(model)) from exc
            raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc
        except RedisError as exc:
            raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc
        if outcome == NOT_FOUND:
            raise VersionGone(model, version)
        if outcome == NO_WORKER:
            raise SluiceError(ErrorCode.NO_WORKER, no_worker_message(model))
        if outcome == QUEUE_FULL:
            raise SluiceError(ErrorCode.QUEUE_FULL, no_worker_message(model))

    def cancel(self, model: str, version: str, job_id: str, ttl_ms: int) -> None:
        """Flag the job as abandoned by its client, off the caller's path."""
        task = asyncio.create_task(self._set_cancel(keys.cancel(model, version, job_id), max(ttl_ms, 1)))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _set_cancel(self, key: str, ttl_ms: int) -> None:
        try:
            await self._redis.send("SET", key, b"1", "PX", ttl_ms)
        except RedisError as exc:
            log.info("cancel flag not set", key=key, error=str(exc))

    async def drain(self) -> None:
        """Wait for pending cancel flags (at shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
