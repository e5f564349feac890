"""Polling helper for integration tests: wait until a condition holds, or fail after a timeout."""

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], object | Awaitable[object]], timeout_s: float = 5.0, interval_s: float = 0.02
) -> None:
    """Return once ``condition()`` is true; raise TimeoutError after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await asyncio.sleep(interval_s)
