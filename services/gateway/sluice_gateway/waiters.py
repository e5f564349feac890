"""What a call waits on while its job runs: a future for unary calls, a bounded buffer for streams.

The reply bus delivers replies into waiters and fails them; the data plane reads them. A waiter
never blocks the bus: a stream whose reader falls too far behind is failed, not waited for.
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
