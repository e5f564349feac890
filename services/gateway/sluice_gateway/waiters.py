"""What a call waits on while its job runs (a future for unary calls, a bounded buffer for streams),
and :class:`ReplyWaiters`, the registry that hands each reply to the waiter of its job.

Broker-neutral: a reply source (``broker.redis_replies`` reading Redis, or an in-memory one in unit
tests) registers waiters, delivers replies into them and fails them; the data plane reads them. A
waiter never blocks its source: a stream whose reader falls too far behind is failed, not waited for.
"""

import asyncio
from collections import deque

from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError

SLOW_READER_MESSAGE = "Service unavailable: the client is not reading the stream fast enough."


class UnaryWaiter:
    """Resolves with the first final reply; later replies are ignored (one answer per call)."""

    __slots__ = ("future", "mark")

    def __init__(self, mark: int) -> None:
        self.future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.mark = mark

    def deliver(self, reply: Reply) -> None:
        if reply.final and not self.future.done():
            self.future.set_result(reply)

    def fail(self, error: SluiceError) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    async def result(self) -> Reply:
        return await self.future

    def discard(self) -> None:
        # A failure nobody will await must not be reported as "exception was never retrieved".
        if self.future.done() and not self.future.cancelled():
            self.future.exception()
        else:
            self.future.cancel()


class StreamWaiter:
    """Buffers every reply of a streaming job, up to ``limit``; a failure is seen before buffered replies."""

    __slots__ = ("_error", "_items", "_limit", "_wakeup", "mark")

    def __init__(self, mark: int, limit: int) -> None:
        self._items: deque[Reply] = deque()
        self._wakeup = asyncio.Event()
        self._error: SluiceError | None = None
        self._limit = limit
        self.mark = mark

    def deliver(self, reply: Reply) -> None:
        if self._error is not None:
            return
        if len(self._items) >= self._limit:
            self.fail(SluiceError(ErrorCode.UNAVAILABLE, SLOW_READER_MESSAGE))
            return
        self._items.append(reply)
        self._wakeup.set()

    def fail(self, error: SluiceError) -> None:
        if self._error is None:
            self._error = error
            self._wakeup.set()

    async def get(self) -> Reply:
        while True:
            if self._error is not None:
                raise self._error
            if self._items:
                return self._items.popleft()
            self._wakeup.clear()
            await self._wakeup.wait()

    def discard(self) -> None:
        self._items.clear()


Waiter = UnaryWaiter | StreamWaiter


class ReplyWaiters:
    """Waiters by job id. A reply for a job nobody waits for (a duplicate after a redelivery, a call
    that already ended) is dropped, which makes each call get exactly one answer."""

    def __init__(self) -> None:
        self._waiters: dict[str, Waiter] = {}
        self._marks = 0

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

    def deliver(self, reply: Reply) -> None:
        waiter = self._waiters.get(reply.job_id)
        if waiter is not None:
            waiter.deliver(reply)

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
