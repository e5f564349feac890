"""A stand-in for the worker that holds a stateful model's sequences, for tests of the gateway side:
it announces itself READY with a heartbeat (so the gateway's enqueue_sequence.lua gives it new
sequences), and a test takes a sequence's jobs off the sequence's stream and answers them, as the
holder does, through the Redis contract in docs/design.md."""

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from sluice.envelope import FIELD, Job, Reply, decode_job, encode_reply
from sluice.redis import keys

from tests.support.responder import announce_worker

HEARTBEAT_TTL_MS = 30_000


class SequenceHolder:
    def __init__(
        self, redis: "aioredis.Redis", model: str, version: str = "1.0", worker_id: str = "9000"
    ) -> None:
        self.redis = redis
        self.model = model
        self.version = version
        self.worker_id = worker_id

    async def announce(self) -> "SequenceHolder":
        await announce_worker(self.redis, self.model, self.version, self.worker_id, HEARTBEAT_TTL_MS)
        return self

    async def held(self) -> set[str]:
        members = await self.redis.smembers(keys.held_sequences(self.model, self.version, self.worker_id))
        return {m.decode() if isinstance(m, bytes) else str(m) for m in members}

    async def queued(self, sequence_id: str) -> list[Job]:
        """The sequence's jobs waiting in its stream, in order."""
        entries: Any = await self.redis.xrange(keys.sequence_jobs(self.model, self.version, sequence_id))
        return [decode_job(fields[FIELD]) for _id, fields in entries]

    async def take(self, sequence_id: str, timeout_s: float = 5.0) -> Job:
        """The sequence's next job, taken off its stream once it arrives."""
        stream = keys.sequence_jobs(self.model, self.version, sequence_id)
        read: Any = await self.redis.xread({stream: "0"}, count=1, block=int(timeout_s * 1000))
        if not read:
            raise TimeoutError(f"no job of sequence {sequence_id} within {timeout_s} s")
        ((_stream, ((entry_id, fields),)),) = read
        await self.redis.xdel(stream, entry_id)
        return decode_job(fields[FIELD])

    async def answer(self, sequence_id: str, *make: Callable[[Job], Reply]) -> Job:
        """Take the sequence's next job and send it the replies ``make`` build, in order."""
        job = await self.take(sequence_id)
        for build in make:
            await self.redis.xadd(job.reply_to, {FIELD: encode_reply(build(job))}, nomkstream=True)
        return job
