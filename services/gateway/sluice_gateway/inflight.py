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


class PendingJob:
    """A job admitted to its queue. :meth:`close` must be called once the caller is done with it:
    it releases the waiter and, if no final reply came, flags the job as cancelled for the workers."""

    __slots__ = (
        "_closed",
        "_finished",
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
        attempt and repeated ``seq`` numbers (a retried XADD) are dropped."""
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
            if reply.final:
                self._finished = True
                self.succeeded = True
                yield reply
                return
            yield reply
            forwarded = True
