"""What the two bidirectional streaming rpcs share (TorchServe StreamPredictions2, Triton
ModelStreamInfer): each inbound request becomes one job; responses go out as they arrive (several jobs
may interleave); errors go out in-stream and the call stays open. The call ends once the client
half-closed and every job answered.

Requests are admitted in arrival order by one pump task (a sequence's jobs enter the queue in the
client's order); each admitted job gets a forwarding task. At most ``max_in_flight`` jobs await
replies; further requests are not read until one finishes, so HTTP/2 flow control pushes back.
"""

import abc
import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Generic, Protocol, TypeVar

from sluice_gateway.grpc_api import RawContext

OUTBOX_MESSAGES = 64


class OpenJob(Protocol):
    def close(self) -> None: ...


JobT = TypeVar("JobT", bound=OpenJob)


class BidiCall(abc.ABC, Generic[JobT]):
    """Subclasses say how a request opens a job (:meth:`open`), which messages a job sends
    (:meth:`messages`) and how a failure mid-job is told (:meth:`failure`)."""

    name = "bidi"

    def __init__(self, context: RawContext, *, max_in_flight: int) -> None:
        self._context = context
        self._slots = asyncio.Semaphore(max_in_flight)
        # None marks the end of the call.
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue(OUTBOX_MESSAGES)
        self._forwarders: dict[asyncio.Task[None], JobT] = {}
        self._failure: Exception | None = None

    @abc.abstractmethod
    async def open(self, raw: bytes) -> JobT | bytes:
        """The job for one request, or the in-stream error message that answers it instead."""

    @abc.abstractmethod
    def messages(self, job: JobT) -> AsyncGenerator[bytes, None]:
        """The messages a job sends, as its replies arrive."""

    @abc.abstractmethod
    def failure(self, job: JobT, error: Exception) -> bytes:
        """The in-stream message for a job that failed after it was admitted."""

    async def run(self, requests: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        pump = asyncio.create_task(self._pump(requests), name=f"{self.name}-pump")
        try:
            while (message := await self._outbox.get()) is not None:
                yield message
            if self._failure is not None:
                raise self._failure
        finally:
            pump.cancel()
            for task, job in list(self._forwarders.items()):
                task.cancel()
                job.close()  # a task cancelled before it ran never reaches its own finally

    async def _pump(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for raw in requests:
                await self._slots.acquire()
                await self._admit(raw)
            await asyncio.gather(*self._forwarders)
        except Exception as exc:  # surfaced by run() after the responses already queued
            self._failure = exc
        # Not in a finally: a cancelled pump has nobody left to tell.
        await self._outbox.put(None)

    async def _admit(self, raw: bytes) -> None:
        opened = await self.open(raw)
        if isinstance(opened, bytes):
            self._slots.release()
            await self._outbox.put(opened)
            return
        task = asyncio.create_task(self._forward(opened), name=f"{self.name}-job")
        self._forwarders[task] = opened
        task.add_done_callback(lambda done: self._forwarders.pop(done, None))

    async def _forward(self, job: JobT) -> None:
        try:
            async with aclosing(self.messages(job)) as messages:
                async for message in messages:
                    await self._outbox.put(message)
        except Exception as exc:
            await self._outbox.put(self.failure(job, exc))
        finally:
            job.close()
            self._slots.release()
