"""The stand-ins for TorchServe's worker socket (``context.cl_socket``) during one handler call.

``send_intermediate_predict_response`` (either import path) writes a predict-response frame with
``cl_socket.sendall``. A sink decodes it into the call's intermediate replies (:class:`ReplyBook`)
and hands them on:

- :class:`ReplySink` (handlers on the torch thread) publishes them from the handler's thread and
  waits until Redis has them, so chunks reach the reply stream in order and before the final reply,
  and a slow Redis slows the handler down instead of piling replies up in memory;
- :class:`ForwardingSink` (async handlers, on the handler loop, which must not wait for Redis) hands
  them to the worker's loop, in the order the frames were written, and returns at once;
- :class:`DirectSink` (handlers run inline, on the worker loop's own thread, which is blocked by the
  call) sends them itself through a client of its own and waits until Redis has them.
"""

import abc
import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Sequence

from sluice.log import get_logger

from sluice_worker import frames
from sluice_worker.replies import Outgoing, ReplyBook

log = get_logger(__name__)

# How often a blocked sendall looks whether the batch was given up (watchdog).
_POLL_S = 0.5


class _FrameSink(abc.ABC):
    """What TorchServe's helpers write intermediate frames to (``context.cl_socket``); subclasses say
    where the replies go."""

    def __init__(self, book: ReplyBook, loop: asyncio.AbstractEventLoop) -> None:
        self._book = book
        self._loop = loop
        self._closed = threading.Event()

    def sendall(self, data: bytes | bytearray | None) -> None:
        """Called by TorchServe's helpers (``None`` when LOCAL_RANK != 0)."""
        if data is None or self._closed.is_set():
            return
        try:
            frame = frames.decode(data)
        except frames.FrameError as exc:
            log.warning("ignoring a malformed intermediate frame", error=str(exc))
            return
        outgoing = self._book.intermediate(frame)
        if outgoing:
            self._hand_on(outgoing)

    @abc.abstractmethod
    def _hand_on(self, outgoing: list[Outgoing]) -> None:
        """Pass the replies of one intermediate frame on (called on the handler's thread)."""

    def close(self) -> None:
        """The call is over (or given up): later frames are dropped."""
        self._closed.set()


class ReplySink(_FrameSink):
    def __init__(
        self,
        book: ReplyBook,
        publish: Callable[[Sequence[Outgoing]], Awaitable[None]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(book, loop)
        self._publish = publish

    def _hand_on(self, outgoing: list[Outgoing]) -> None:
        future = asyncio.run_coroutine_threadsafe(self._send(outgoing), self._loop)
        while True:
            try:
                future.result(timeout=_POLL_S)
                return
            except concurrent.futures.TimeoutError:
                if self._closed.is_set():
                    future.cancel()
                    return

    async def _send(self, outgoing: Sequence[Outgoing]) -> None:
        await self._publish(outgoing)


class ForwardingSink(_FrameSink):
    def __init__(
        self,
        book: ReplyBook,
        forward: Callable[[Sequence[Outgoing]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(book, loop)
        self._forward = forward

    def _hand_on(self, outgoing: list[Outgoing]) -> None:
        self._loop.call_soon_threadsafe(self._forward, outgoing)


class DirectSink(_FrameSink):
    def __init__(
        self,
        book: ReplyBook,
        send: Callable[[Sequence[Outgoing], threading.Event], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(book, loop)
        self._send = send

    def _hand_on(self, outgoing: list[Outgoing]) -> None:
        self._send(outgoing, self._closed)
