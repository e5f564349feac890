"""Replies and acks sent in order as they come, for loops whose answers do not come in batches
(async handlers): what was queued during one event-loop turn leaves in one write, and each write is
confirmed before the next goes, so a resend after a Redis outage can never land behind a later chunk
of the same stream."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from sluice_worker.broker.retries import until_done
from sluice_worker.broker.source import JobSource
from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing


class ReplyPump:
    def __init__(self, source: JobSource) -> None:
        self._source = source
        self._outgoing: list[Outgoing] = []
        self._done: list[Delivery] = []
        self._queued = asyncio.Event()
        self._sending = False
        self._idle = asyncio.Event()
        self._idle.set()

    def put(self, outgoing: Sequence[Outgoing], done: Sequence[Delivery] = ()) -> None:
        """Send ``outgoing``, then acknowledge ``done``, after everything put before."""
        self._outgoing += outgoing
        self._done += done
        self._idle.clear()
        self._queued.set()

    @property
    def idle(self) -> bool:
        return not self._sending and not self._outgoing and not self._done

    async def run(self) -> None:
        """Send what is put, until cancelled."""
        while True:
            await self._queued.wait()
            self._queued.clear()
            await asyncio.sleep(0)  # let the rest of this turn's answers join the write
            outgoing, self._outgoing = self._outgoing, []
            done, self._done = self._done, []
            self._sending = True
            try:
                await until_done(_sender(self._source, outgoing, done), "replies and acks")
            finally:
                self._sending = False
            if self.idle:
                self._idle.set()

    async def drained(self) -> None:
        """Wait until everything put so far was sent and confirmed."""
        await self._idle.wait()


def _sender(
    source: JobSource, outgoing: list[Outgoing], done: list[Delivery]
) -> Callable[[], Awaitable[None]]:
    return lambda: source.finish(outgoing, done)
