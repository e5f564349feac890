"""Jobs in flight, as the data plane hands them to transports: a unary job's final reply, or a
streaming job's replies in order. Whoever holds one closes it when done."""

import asyncio
import time
from collections.abc import AsyncGenerator, Callable

from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError

from sluice_gateway.job_envelopes import failure_from_reply
from sluice_gateway.waiters import StreamWaiter, UnaryWaiter, Waiter

DEADLINE_MESSAGE = "Timed out waiting for the model's response."
LOST_MID_STREAM_MESSAGE = "worker lost mid-stream"

# Called once by close(): (job, whether to flag it as cancelled for the workers).
Release = Callable[["PendingJob", bool], None]
# Called for each chunk a call that streams yields (metrics): (job, nanoseconds since the job was
# created, for the first chunk, else since the previous chunk; whether it is the first).
ChunkObserver = Callable[["PendingJob", int, bool], None]


class PendingJob:
    """A job admitted to its queue. :meth:`close` must be called once the caller is done with it:
    it releases the waiter and, if no final reply came, flags the job as cancelled for the workers."""

    __slots__ = (
        "_closed",
        "_finished",
        "_last_chunk_ns",
        "_on_chunk",
        "_release",
        "_timer",
        "_waiter",
        "cold",
        "created_ns",
        "deadline_ms",
        "enqueued_unix_ms",
        "job_id",
        "model",
        "requested_version",
        "sequence_id",
        "started_unix_ms",
        "succeeded",
        "version",
    )

    def __init__(
        self,
        release: Release,
        waiter: Waiter,
        *,
        model: str,
        version: str,
        job_id: str,
        deadline_ms: int,
        requested_version: str = "",
        enqueued_unix_ms: int = 0,
        on_chunk: ChunkObserver | None = None,
    ) -> None:
        self._release = release
        self._waiter = waiter
        self._timer: asyncio.TimerHandle | None = None
        self._finished = False
        self._closed = False
        self.model = model
        self.version = version
        self.job_id = job_id
        self.deadline_ms = deadline_ms
        # For metrics: the version the client named ("" = default), and when the job was queued and
        # (from the first successful reply) when a worker started it; 0 = not known.
        self.requested_version = requested_version
        self.enqueued_unix_ms = enqueued_unix_ms
        self.started_unix_ms = 0
        self.succeeded = False
        self.created_ns = time.monotonic_ns()
        # Admitted while the version ran no worker: it waited for one to start (metrics).
        self.cold = False
        # The sequence of a stateful model's job ("" for none): REST answers name it.
        self.sequence_id = ""
        # Streaming jobs (StreamJob.replies): who times the chunks, and when the last one was yielded.
        self._on_chunk = on_chunk
        self._last_chunk_ns = 0

    def arm(self, loop: asyncio.AbstractEventLoop, expires_at: float) -> None:
        """Fail the wait with DEADLINE_EXCEEDED at loop time ``expires_at``."""
        self._timer = loop.call_at(expires_at, self._expire)

    def _expire(self) -> None:
        self._waiter.fail(SluiceError(ErrorCode.DEADLINE_EXCEEDED, DEADLINE_MESSAGE))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._release(self, not self._finished)


class UnaryJob(PendingJob):
    __slots__ = ()

    async def result(self) -> Reply:
        """The final reply of a successful job; raises the domain error of a failed one."""
        assert isinstance(self._waiter, UnaryWaiter)
        reply = await self._waiter.result()
        self._finished = True
        if reply.error_code:
            raise failure_from_reply(reply)
        self.started_unix_ms = reply.started_unix_ms
        self.succeeded = True
        return reply


class StreamJob(PendingJob):
    __slots__ = ()

    async def replies(self) -> AsyncGenerator[Reply, None]:
        """Every successful reply in order, the final one last; raises the domain error of a failure.

        A redelivered job restarts at a higher ``attempt``: accepted while nothing was forwarded,
        otherwise the call fails (chunks of two attempts are never spliced). Replies of an older
        attempt and repeated ``seq`` numbers (a retried XADD) are dropped.

        The call streams once a reply with a payload comes before the final one; from then on,
        every reply with a payload is a chunk, told to ``on_chunk`` as it is yielded. A call
        answered by its final reply alone is not timed (it did not stream)."""
        assert isinstance(self._waiter, StreamWaiter)
        attempt, next_seq, forwarded = 0, 0, False
        while True:
            reply = await self._waiter.get()
            if reply.attempt < attempt:
                continue
            if reply.error_code:  # a failure ends the call whichever attempt sent it
                self._finished = True
                raise failure_from_reply(reply)
            if reply.attempt > attempt:
                if forwarded:
                    raise SluiceError(ErrorCode.UNAVAILABLE, LOST_MID_STREAM_MESSAGE)
                attempt, next_seq = reply.attempt, 0
            if reply.seq < next_seq:
                continue
            next_seq = reply.seq + 1
            self.started_unix_ms = self.started_unix_ms or reply.started_unix_ms
            if self._on_chunk is not None and reply.payload and (self._last_chunk_ns or not reply.final):
                self._chunk(self._on_chunk)
            if reply.final:
                self._finished = True
                self.succeeded = True
                yield reply
                return
            yield reply
            forwarded = True

    def _chunk(self, on_chunk: ChunkObserver) -> None:
        now_ns = time.monotonic_ns()
        first = not self._last_chunk_ns
        on_chunk(self, now_ns - (self.created_ns if first else self._last_chunk_ns), first)
        self._last_chunk_ns = now_ns
