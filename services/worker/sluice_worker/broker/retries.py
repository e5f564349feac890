"""Waiting out broker outages (Redis restarts, failovers) instead of crash-looping."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError as RedisPyError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sluice.lifecycle.backoff import Backoff
from sluice.log import get_logger
from sluice.redis import errors as redis_errors

from sluice_worker.broker.source import BrokerUnavailable

T = TypeVar("T")
log = get_logger(__name__)

# The worker talks to Redis through redis-py (bookkeeping, claim scans, heartbeats) and through
# Sluice's pipelined client (the hot path), whose failures are sluice.redis.errors.
# What a Redis that is down, restarting or still loading its AOF looks like (redis-py's
# BusyLoadingError is a ConnectionError).
REDIS_DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    redis_errors.RedisDown,
    OSError,
)
# What until_done waits out: Redis (or the job source built on it) not answering.
RETRYABLE: tuple[type[BaseException], ...] = (*REDIS_DOWN, BrokerUnavailable)
# Any failed command, from either client.
REDIS_FAILED: tuple[type[BaseException], ...] = (RedisPyError, redis_errors.RedisError)


async def until_done(operation: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``operation`` until the broker lets it complete; other errors propagate."""
    backoff = Backoff()
    while True:
        try:
            return await operation()
        except RETRYABLE as exc:
            delay_s = backoff.next_delay_s()
            log.warning("Redis unavailable, retrying", what=what, error=str(exc), retry_in_s=delay_s)
            await asyncio.sleep(delay_s)


async def best_effort(operation: Callable[[], Awaitable[object]], what: str, within_s: float) -> bool:
    """:func:`until_done` for at most ``within_s``: whether ``operation`` completed. For a stopping
    worker's last steps, which what outlives it (heartbeat TTLs, peers' reaping) also covers: a Redis
    that stays away must not keep the process from ending."""
    try:
        async with asyncio.timeout(within_s):
            await until_done(operation, what)
            return True
    except TimeoutError:
        log.warning("Redis still unavailable, giving up", what=what, waited_s=within_s)
        return False
