"""Answering the jobs left in a version's stream when no worker will ever run them (the version was
unregistered, or scaled to zero): each gets a final failure reply on its gateway's reply stream, then
leaves the stream (XACK + XDEL), so no client waits for its deadline and no job is dropped silently."""

from typing import Any, cast

import redis.asyncio as aioredis
from sluice import envelope
from sluice.envelope import EnvelopeError, Reply
from sluice.errors import SluiceError
from sluice.log import get_logger
from sluice.redis import keys

log = get_logger(__name__)

_PAGE = 200


def failure_reply(job_id: str, error: SluiceError) -> Reply:
    return Reply(
        job_id=job_id,
        seq=0,
        final=True,
        status_code=error.http_status,
        message=error.message,
        error_code=error.code.value,
        attempt=1,
    )


class QueuedJobs:
    """A version's job stream, as the manager sees it: how many jobs wait, and answering them."""

    def __init__(self, redis: "aioredis.Redis") -> None:
        self._redis = redis

    async def count(self, model: str, version: str) -> int:
        """Jobs queued or in flight (acknowledged jobs leave the stream)."""
        return int(await self._redis.xlen(keys.job_stream(model, version)))

    async def fail_all(self, model: str, version: str, error: SluiceError) -> int:
        """Reply ``error`` to every job in the version's stream and remove it; returns how many."""
        return await fail_queued_jobs(self._redis, model, version, error)


async def fail_queued_jobs(redis: "aioredis.Redis", model: str, version: str, error: SluiceError) -> int:
    """Reply ``error`` to every job in the version's stream and remove it; returns how many."""
    stream = keys.job_stream(model, version)
    answered = 0
    while True:
        entries = cast(list[tuple[Any, dict[Any, Any]]], await redis.xrange(stream, "-", "+", count=_PAGE))
        if not entries:
            return answered
        async with redis.pipeline(transaction=False) as pipe:
            for _, fields in entries:
                answered += _queue_reply(fields, pipe, error)
            ids = [entry_id for entry_id, _ in entries]
            pipe.xack(stream, keys.JOB_GROUP, *ids)
            pipe.xdel(stream, *ids)
            # Without a consumer group yet the XACK fails; the replies and the XDEL still run.
            await pipe.execute(raise_on_error=False)


def _queue_reply(fields: dict[Any, Any], pipe: Any, error: SluiceError) -> int:
    """Queue the failure reply of one entry on ``pipe``; 1 if the job could be answered."""
    raw = fields.get(envelope.FIELD) or fields.get(envelope.FIELD.decode())
    if raw is None:
        return 0
    try:
        job = envelope.decode_job(raw)
    except EnvelopeError:
        return 0
    if not job.reply_to:
        return 0
    reply = envelope.encode_reply(failure_reply(job.job_id, error))
    pipe.xadd(job.reply_to, {envelope.FIELD: reply}, nomkstream=True)
    return 1
