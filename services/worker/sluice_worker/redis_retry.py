"""Waiting out Redis outages (restarts, failovers) instead of crash-looping."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError as RedisPyError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sluice import redis_errors
from sluice.log import get_logger

T = TypeVar("T")
log = get_logger(__name__)

# The worker talks to Redis through redis-py (bookkeeping, claim scans, heartbeats) and through
# Sluice's pipelined client (the hot path), whose failures are sluice.redis_errors.
# What a Redis that is down, restarting or still loading its AOF looks like (redis-py's
# BusyLoadingError is a ConnectionError).
REDIS_DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    redis_errors.RedisDown,
    OSError,
)
# Any failed command, from either client.
REDIS_FAILED: tuple[type[BaseException], ...] = (RedisPyError, redis_errors.RedisError)


class Backoff:
    """Exponential delays: first_s, 2 * first_s, ... capped at cap_s."""

    def __init__(self, first_s: float = 0.1, cap_s: float = 2.0) -> None:
        self._first_s = first_s
        self._cap_s = cap_s
        self._next_s = first_s

    def next_delay_s(self) -> float:
        delay = self._next_s
        self._next_s = min(self._next_s * 2, self._cap_s)
        return delay

    def reset(self) -> None:
        self._next_s = self._first_s


async def until_done(operation: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``operation`` until Redis lets it complete; other errors propagate."""
    backoff = Backoff()
    while True:
        try:
            return await operation()
        except REDIS_DOWN as exc:
            delay_s = backoff.next_delay_s()
            log.warning("Redis unavailable, retrying", what=what, error=str(exc), retry_in_s=delay_s)
            await asyncio.sleep(delay_s)
