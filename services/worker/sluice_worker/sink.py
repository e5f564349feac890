"""The stand-in for TorchServe's worker socket (``context.cl_socket``) during one batch.

``send_intermediate_predict_response`` (either import path) writes a predict-response frame with
``cl_socket.sendall``. The sink decodes it and publishes the intermediate replies from the handler's
thread, waiting until Redis has them, so chunks reach the reply stream in order and before the final
reply, and a slow Redis slows the handler down instead of piling replies up in memory.
"""

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


class ReplySink:
    def __init__(
        self,
        book: ReplyBook,
        publish: Callable[[Sequence[Outgoing]], Awaitable[None]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._book = book
        self._publish = publish
        self._loop = loop
        self._closed = threading.Event()

    def sendall(self, data: bytes | bytearray | None) -> None:
        """Called on the torch thread by TorchServe's helpers (``None`` when LOCAL_RANK != 0)."""
        if data is None or self._closed.is_set():
            return
        try:
            frame = frames.decode(data)
        except frames.FrameError as exc:
            log.warning("ignoring a malformed intermediate frame", error=str(exc))
            return
        outgoing = self._book.intermediate(frame)
        if not outgoing:
            return
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

    def close(self) -> None:
        """The batch is over (or given up): later frames are dropped."""
        self._closed.set()


class ForwardingSink:
    """An async handler's ``context.cl_socket``: it runs on the handler loop, which must not wait for
    Redis, so each intermediate frame's replies are handed to the worker's loop (``forward`` runs
    there, in the order the frames were written) and the handler goes on at once."""

    def __init__(
        self,
        book: ReplyBook,
        forward: Callable[[Sequence[Outgoing]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._book = book
        self._forward = forward
        self._loop = loop
        self._closed = threading.Event()

    def sendall(self, data: bytes | bytearray | None) -> None:
        if data is None or self._closed.is_set():
            return
        try:
            frame = frames.decode(data)
        except frames.FrameError as exc:
            log.warning("ignoring a malformed intermediate frame", error=str(exc))
            return
        outgoing = self._book.intermediate(frame)
        if outgoing:
            self._loop.call_soon_threadsafe(self._forward, outgoing)

    def close(self) -> None:
        self._closed.set()
