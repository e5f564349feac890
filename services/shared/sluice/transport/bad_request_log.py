"""What an HTTP listener logs about requests it could not parse, at a bounded rate.

aiohttp answers a malformed request (a request line or header over its size limits, a bad method,
bad framing) with 400 and logs it at ERROR with a full traceback through its ``aiohttp.server``
logger. A client that sends such requests in a loop would grow the log without bound. The listener
hands aiohttp a :class:`BadRequestLog` as that logger instead: a parse error becomes one WARNING line
(listener, client address, status, reason; never the request's bytes), at most ``limit`` lines per
``interval_s`` and listener, then one line saying how many similar events it held back. Every other
record goes to aiohttp's logger unchanged (an unhandled exception keeps its traceback).
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.log import server_logger

from sluice.log import get_logger

log = get_logger(__name__)


def reason(error: HttpProcessingError) -> str:
    """What was wrong with the request, without its bytes: aiohttp's messages quote part of the line
    or header, which may hold a key."""
    name = type(error).__name__
    if isinstance(error, LineTooLong):
        return f"{name}: request line or header over {error.args[1]} bytes"
    return name


@dataclass
class LogBudget:
    """At most ``limit`` events per window of ``interval_s``; the window opens at the first event
    after the previous one closed. Counts the events it refuses until :meth:`close_window`."""

    limit: int
    interval_s: float
    clock: Callable[[], float] = time.monotonic
    _opened_at: float | None = field(default=None, init=False)
    _used: int = field(default=0, init=False)
    _held: int = field(default=0, init=False)

    def take(self) -> tuple[bool, int]:
        """(log this event, or hold it back and count it; the count of the window it closed, if its
        time was up)."""
        closed_held = self.close_window()
        if self._opened_at is None:
            self._opened_at = self.clock()
        if self._used < self.limit:
            self._used += 1
            return True, closed_held
        self._held += 1
        return False, closed_held

    def close_window(self, force: bool = False) -> int:
        """Close the window if its time is up (or ``force``); returns the events it held back (0 while
        it stays open)."""
        if self._opened_at is None:
            return 0
        if not force and self.clock() - self._opened_at < self.interval_s:
            return 0
        held = self._held
        self._opened_at, self._used, self._held = None, 0, 0
        return held

    def left_s(self) -> float:
        """Time until the open window closes (0 when none is open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self.interval_s - self.clock())


class BadRequestLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger for one listener (the ``logger`` argument of its request handler)."""

    def __init__(self, listener: str, budget: LogBudget) -> None:
        super().__init__(server_logger, {})
        self._listener = listener
        self._budget = budget
        self._summary: asyncio.TimerHandle | None = None

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if not isinstance(exc_info, HttpProcessingError):
            super().exception(msg, *args, exc_info=exc_info, **kwargs)
            return
        # aiohttp's call: ("Error handling request from %s", request.remote, exc_info=error).
        client = str(args[0]) if args and args[0] is not None else ""
        admitted, closed_held = self._budget.take()
        self._summarize(closed_held)
        if admitted:
            log.warning(
                "bad http request refused",
                listener=self._listener,
                client=client,
                status=exc_info.code,
                reason=reason(exc_info),
            )
        elif self._summary is None:
            # The window's count is written when it closes, even if no request follows.
            loop = asyncio.get_running_loop()
            self._summary = loop.call_later(self._budget.left_s(), self._close_window)

    def flush(self) -> None:
        """Write what the open window held back now (the listener is stopping)."""
        if self._summary is not None:
            self._summary.cancel()
            self._summary = None
        self._summarize(self._budget.close_window(force=True))

    def _close_window(self) -> None:
        self._summary = None
        left_s = self._budget.left_s()
        if left_s > 0:
            # The timer fired early, or a later window opened meanwhile: write when that one closes.
            self._summary = asyncio.get_running_loop().call_later(left_s, self._close_window)
            return
        self._summarize(self._budget.close_window(force=True))

    def _summarize(self, held: int) -> None:
        if held:
            log.warning(
                "suppressed similar bad http requests",
                listener=self._listener,
                suppressed=held,
                interval_s=self._budget.interval_s,
            )
