"""The gateway's reply bus: one XREAD BLOCK loop on the gateway's own reply stream hands replies to
the calls waiting for them, keyed by job id.

A reply for a job nobody waits for (a duplicate after a redelivery, a call that already ended) is
dropped, which makes each call get exactly one answer. Read entries are trimmed (``XTRIM MINID``) in
the same round trip as the next read, so an entry is never read twice, even after the read position
is reset.
"""

import asyncio
from typing import Any

from sluice.backoff import Backoff
from sluice.cancellation import cancel_and_wait
from sluice.envelope import FIELD, EnvelopeError, decode_reply
from sluice.errors import SluiceError
from sluice.log import get_logger
from sluice.pipelined_redis import PipelinedRedis
from sluice.redis_errors import RedisError

from sluice_gateway.waiters import StreamWaiter, UnaryWaiter, Waiter

log = get_logger(__name__)

START_ID = b"0-0"


def next_id(entry_id: bytes) -> bytes:
    """The smallest stream id after ``entry_id`` (``XTRIM MINID`` keeps ids >= the one given)."""
    ms, _, seq = entry_id.partition(b"-")
    return ms + b"-" + str(int(seq or b"0") + 1).encode()


class ReplyBus:
    """Waiter registry plus the reader task. ``redis`` must be a client reserved for this bus (its
    blocking read would stall any other command) with a timeout longer than ``block_s``."""

    def __init__(self, redis: PipelinedRedis, stream: str, *, block_s: float, count: int) -> None:
        self._redis = redis
        self._stream = stream
        self._block_ms = int(block_s * 1000)
        self._count = count
        self._waiters: dict[str, Waiter] = {}
        self._marks = 0
        self._last_id = START_ID
        self._trim_from: bytes | None = None
        self._task: asyncio.Task[None] | None = None

    # Waiters -------------------------------------------------------------------------------------
    def expect(self, job_id: str) -> UnaryWaiter:
        self._marks += 1
        waiter = UnaryWaiter(self._marks)
        self._waiters[job_id] = waiter
        return waiter

    def expect_stream(self, job_id: str, limit: int) -> StreamWaiter:
        self._marks += 1
        waiter = StreamWaiter(self._marks, limit)
        self._waiters[job_id] = waiter
        return waiter

    def forget(self, job_id: str) -> None:
        waiter = self._waiters.pop(job_id, None)
        if waiter is not None:
            waiter.discard()

    @property
    def in_flight(self) -> int:
        return len(self._waiters)

    def mark(self) -> int:
        """A point in registration order, for :meth:`fail_before`."""
        return self._marks

    def fail_before(self, mark: int, error: SluiceError) -> int:
        """Fail every waiter registered at or before ``mark``; returns how many."""
        failed = 0
        for waiter in self._waiters.values():
            if waiter.mark <= mark:
                waiter.fail(error)
                failed += 1
        return failed

    def restart_from_beginning(self) -> None:
        """Read the (recreated) stream from its first entry."""
        self._last_id = START_ID
        self._trim_from = None

    def dispatch(self, raw: bytes) -> None:
        try:
            reply = decode_reply(raw)
        except EnvelopeError:
            log.warning("reply entry dropped: not a valid Reply")
            return
        waiter = self._waiters.get(reply.job_id)
        if waiter is not None:
            waiter.deliver(reply)

    # Reader --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reply-bus")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        backoff = Backoff(first_s=0.05, jitter=True)
        while True:
            try:
                await self.read_once()
                backoff.reset()
            except RedisError as exc:
                delay_s = backoff.next_delay_s()
                log.warning("reply stream read failed", error=str(exc), retry_in_s=round(delay_s, 3))
                await asyncio.sleep(delay_s)
            except Exception:
                log.exception("reply bus error")
                await asyncio.sleep(backoff.next_delay_s())

    async def read_once(self) -> None:
        """One blocking read (preceded by the trim of what the last read consumed)."""
        trimmed = None
        if self._trim_from is not None:
            trimmed = self._redis.send("XTRIM", self._stream, "MINID", self._trim_from)
        read = self._redis.send(
            "XREAD", "COUNT", self._count, "BLOCK", self._block_ms, "STREAMS", self._stream, self._last_id
        )
        result = await read
        if trimmed is not None:  # answered before the read (replies come in order)
            trimmed.result()
            self._trim_from = None
        if result:
            self._consume(result)

    def _consume(self, result: Any) -> None:
        """``result`` is XREAD's raw reply: ``[[stream, [[id, [field, value, ...]], ...]]]``."""
        for _stream, entries in result:
            for entry_id, fields in entries:
                raw = _field(fields, FIELD)
                if raw is not None:
                    self.dispatch(raw)
                self._last_id = entry_id
        self._trim_from = next_id(self._last_id)


def _field(fields: list[bytes] | None, name: bytes) -> bytes | None:
    """The value of ``name`` in a flat ``[field, value, ...]`` list."""
    if not fields:
        return None
    for index in range(0, len(fields) - 1, 2):
        if fields[index] == name:
            return fields[index + 1]
    return None
