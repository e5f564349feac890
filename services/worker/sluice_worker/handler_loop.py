"""The thread async handlers (``asyncCommunication: true``) run on: one asyncio event loop of their
own, apart from the worker's loop that talks to Redis, so a handler that computes between its
awaits delays other handler calls, never the worker's reads, replies and heartbeats (TorchServe's
async worker likewise keeps its socket threads apart from the handler's loop)."""

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class HandlerLoop:
    def __init__(self, on_start: Callable[[], None] = lambda: None, name: str = "handler-loop") -> None:
        """``on_start`` runs first on the thread (CUDA's current device is per thread)."""
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._on_start = on_start
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        """Run ``coroutine`` on the handler loop; cancelling the future cancels it there."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._on_start()
        finally:
            self._started.set()
        self._loop.run_forever()
