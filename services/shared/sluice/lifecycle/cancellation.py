"""Stopping background loops reliably.

redis-py can turn a cancellation that lands inside a command (while it connects) into a
``ConnectionError``; a loop that logs Redis errors and carries on then swallows the cancellation and
sleeps again, and a plain ``task.cancel(); await task`` waits forever. :func:`cancel_and_wait` cancels
again until the task is really done.
"""

import asyncio
import contextlib
from typing import Any

_RECANCEL_S = 0.1


async def cancel_and_wait(task: "asyncio.Task[Any]") -> None:
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=_RECANCEL_S)
    if not task.cancelled():
        with contextlib.suppress(asyncio.CancelledError, Exception):
            task.result()
