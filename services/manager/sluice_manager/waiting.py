"""Waiting without hanging: for "stop, or a wake-up, or the interval" in the manager's loops, and for
tasks to end at shutdown.

``asyncio.wait`` with its own timeout never cancels the waiting task (``asyncio.timeout`` works by
cancelling it), so a loop iteration can only end by returning, never half-way through a cancellation.
"""

import asyncio
from typing import Any


async def wait_any(*events: asyncio.Event, timeout_s: float) -> None:
    """Return when one of ``events`` is set, or after ``timeout_s``."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def finish(task: "asyncio.Future[Any]", timeout_s: float, *, cancel_first: bool = False) -> bool:
    """Let ``task`` end (or cancel it first), waiting at most ``timeout_s``; True if it ended.

    Never waits unbounded on a cancelled task: redis-py's asyncio pipelines (8.1) can swallow a
    cancellation, and the task then runs on as if nothing had happened. So long-running tasks are asked
    to stop through a flag or an event, and cancelling is the fallback, not the plan."""
    if cancel_first:
        task.cancel()
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done and not cancel_first:
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=1.0)
    if done and not task.cancelled():
        task.exception()  # retrieved: the caller logs failures it cares about
    return bool(done)
