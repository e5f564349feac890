"""The gateway's reply source on Redis (:class:`~.seam.ReplySource`): one XREAD BLOCK loop on the
gateway's own reply stream hands replies to the calls waiting for them (:class:`ReplyWaiters`), keyed
by job id.

An entry holds one or more replies, each in a field named ``m`` (:data:`sluice.envelope.FIELD`,
repeated: ``XADD <stream> NOMKSTREAM * m <Reply> m <Reply> ...``, so a worker publishes one
iteration's chunks in one command per reply stream). They are dispatched in field order, which
Redis keeps.

Read entries are trimmed (``XTRIM MINID``) in the same round trip as a later read, so an entry is
never read twice, even after the read position is reset. Not after every read: once
``TRIM_EVERY_ENTRIES`` entries or ``TRIM_EVERY_BYTES`` bytes were read since the last trim, or
``TRIM_AFTER_S`` after the first of them (a read blocks no longer than that), or when a read comes
back empty. At C=1 that spares each call an ``XTRIM``; the stream holds at most a few hundred
answered replies, and none ~``TRIM_AFTER_S`` after the last call.
"""

import asyncio
import time
from typing import Any

from sluice.envelope import FIELD, EnvelopeError, decode_reply
from sluice.errors import SluiceError
from sluice.lifecycle.backoff import Backoff
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger
from sluice.redis.errors import RedisError
from sluice.redis.link import RedisLink

from sluice_gateway.waiters import ReplyWaiters, StreamWaiter, UnaryWaiter

log = get_logger(__name__)

START_ID = b"0-0"
TRIM_EVERY_ENTRIES = 256
TRIM_EVERY_BYTES = 1 << 20
TRIM_AFTER_S = 0.5


def next_id(entry_id: bytes) -> bytes:
    """The smallest stream id after ``entry_id`` (``XTRIM MINID`` keeps ids >= the one given)."""
    ms, _, seq = entry_id.partition(b"-")
    return ms + b"-" + str(int(seq or b"0") + 1).encode()


class RedisReplies:
    """Waiters plus the reader task. ``redis`` must be a client reserved for this reader (its
    blocking read would stall any other command) with a timeout longer than ``block_s``."""

    def __init__(self, redis: RedisLink, stream: str, *, block_s: float, count: int) -> None:
        self._redis = redis
        self._stream = stream
        self._block_ms = int(block_s * 1000)
        self._count = count
        self.waiters = ReplyWaiters()
        self._last_id = START_ID
        self._trim_from: bytes | None = None
        # Read since the last trim: entries, their bytes, and when the trim is due regardless.
        self._untrimmed = 0
        self._untrimmed_bytes = 0
        self._trim_due_at = 0.0
        self._task: asyncio.Task[None] | None = None

    # Reply source --------------------------------------------------------------------------------
    @property
    def reply_to(self) -> str:
        return self._stream

    def expect(self, job_id: str) -> UnaryWaiter:
        return self.waiters.expect(job_id)

    def expect_stream(self, job_id: str, limit: int) -> StreamWaiter:
        return self.waiters.expect_stream(job_id, limit)

    def forget(self, job_id: str) -> None:
        self.waiters.forget(job_id)

    @property
    def in_flight(self) -> int:
        return self.waiters.in_flight

    # The stream's loss (see reply_stream_keeper) -------------------------------------------------
    def mark(self) -> int:
        """A point in registration order, for :meth:`stream_recreated`."""
        return self.waiters.mark()

    def stream_recreated(self, mark: int, error: SluiceError) -> int:
        """The stream was missing and was created again, empty: read it from its first entry, and
        fail with ``error`` the calls registered at or before ``mark``, whose replies may have been
        dropped meanwhile. Returns how many."""
        self._last_id = START_ID
        self._trim_from = None
        self._untrimmed = self._untrimmed_bytes = 0
        return self.waiters.fail_before(mark, error)

    def dispatch(self, raw: bytes) -> None:
        try:
            reply = decode_reply(raw)
        except EnvelopeError:
            log.warning("reply entry dropped: not a valid Reply")
            return
        self.waiters.deliver(reply)

    # Reader --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reply-reader")

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
                log.exception("reply reader error")
                await asyncio.sleep(backoff.next_delay_s())

    async def read_once(self) -> None:
        """One blocking read, preceded by the trim of what earlier reads consumed when it is due."""
        trimmed = None
        if self._trim_from is not None and self._trim_due():
            trimmed = self._redis.send("XTRIM", self._stream, "MINID", self._trim_from)
        read = self._redis.send(
            "XREAD",
            "COUNT",
            self._count,
            "BLOCK",
            self._block_for_ms(),
            "STREAMS",
            self._stream,
            self._last_id,
        )
        result = await read
        if trimmed is not None:  # answered before the read (replies come in order)
            trimmed.result()
            self._trim_from = None
            self._untrimmed = self._untrimmed_bytes = 0
        if result:
            self._consume(result)
        else:
            self._trim_due_at = 0.0  # idle: trim with the next read

    def _block_for_ms(self) -> int:
        """The read's BLOCK: no longer than until the trim is due, so that when replies stop coming
        the last ones are trimmed within ~``TRIM_AFTER_S`` (BLOCK 0 would mean forever)."""
        if self._trim_from is None:
            return self._block_ms
        return max(1, min(self._block_ms, int((self._trim_due_at - time.monotonic()) * 1000)))

    def _trim_due(self) -> bool:
        return (
            self._untrimmed >= TRIM_EVERY_ENTRIES
            or self._untrimmed_bytes >= TRIM_EVERY_BYTES
            or time.monotonic() >= self._trim_due_at
        )

    def _consume(self, result: Any) -> None:
        """``result`` is XREAD's raw reply: ``[[stream, [[id, [field, value, ...]], ...]]]``."""
        if self._trim_from is None:
            self._trim_due_at = time.monotonic() + TRIM_AFTER_S
        for _stream, entries in result:
            for entry_id, fields in entries:
                self._untrimmed_bytes += self._dispatch_entry(fields)
                self._untrimmed += 1
                self._last_id = entry_id
        self._trim_from = next_id(self._last_id)

    def _dispatch_entry(self, fields: list[bytes] | None) -> int:
        """Dispatch every reply of an entry (its ``m`` fields, in order, in a flat
        ``[field, value, ...]`` list); returns their size in bytes, for the trim."""
        size = 0
        if not fields:  # an entry without fields (a deleted entry's id, as XREAD may list it)
            return size
        for index in range(0, len(fields) - 1, 2):
            if fields[index] == FIELD:
                raw = fields[index + 1]
                self.dispatch(raw)
                size += len(raw)
        return size
