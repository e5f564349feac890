"""The one place torch runs: a single daemon thread that loads the handler and runs every batch.

One thread because TorchServe handlers assume one caller (a TorchServe worker process is
single-threaded) and CUDA's current device is per thread. A daemon thread, unlike a
``ThreadPoolExecutor`` worker, does not keep the process alive when a handler hangs: the worker can
answer the batch, exit and be replaced.
"""

import asyncio
import concurrent.futures
import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Item = tuple["concurrent.futures.Future[Any]", Callable[[], Any]]


class HandlerExit(Exception):
    """The code running on the torch thread raised ``SystemExit`` (``sys.exit()`` in a handler) or
    another ``BaseException`` that is not an ``Exception``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(repr(cause))
        self.cause = cause


class TorchThread:
    def __init__(self, name: str = "torch") -> None:
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        # How long the last call ran on this thread (set before its caller hears of the result).
        self.last_call_s = 0.0
        # Seconds of calls run so far, and when the running call (if any) began.
        self._clock = threading.Lock()
        self._ran_s = 0.0
        self._running_since: float | None = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """True while a call runs (after a timeout: the call we gave up on is still running)."""
        return self._running_since is not None

    def busy_s(self) -> float:
        """Seconds this thread has spent running calls, the running one included (what the
        heartbeat reports as the worker's busy share, the autoscaler's measure of load)."""
        with self._clock:
            since = self._running_since
            return self._ran_s + (time.perf_counter() - since if since is not None else 0.0)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the torch thread, with the caller's contextvars (log context)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        context = contextvars.copy_context()
        self._queue.put((future, lambda: context.run(fn, *args)))
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Let the thread end after the calls already queued."""
        self._queue.put(None)

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue
            with self._clock:
                self._running_since = started = time.perf_counter()
            try:
                result = call()
            except BaseException as exc:  # sys.exit() in a handler must not end this thread silently
                self.last_call_s = self._end(started)
                future.set_exception(exc if isinstance(exc, Exception) else HandlerExit(exc))
            else:
                self.last_call_s = self._end(started)
                future.set_result(result)

    def _end(self, started: float) -> float:
        """Close the running call's time: how long it ran."""
        with self._clock:
            elapsed = time.perf_counter() - started
            self._ran_s += elapsed
            self._running_since = None
            return elapsed
