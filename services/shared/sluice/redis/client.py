"""Redis connections for every service: one place for timeouts, retries and the hiredis parser.

A ``redis+sentinel://`` URL (:mod:`sluice.redis.target`) gives a client of the master that redis-py
finds through the Sentinels: each new connection asks them, and a connection that meets a replica
(a master demoted by a failover) is dropped and retried on the new master.
"""

from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry as SyncRetry
from redis.sentinel import Sentinel as SyncSentinel

from sluice.redis.target import SentinelTarget, is_sentinel, parse_sentinel_url

# Socket timeout for ordinary commands; blocking reads use their own (longer) client.
COMMAND_TIMEOUT_S = 5.0


def connect(url: str, *, blocking_read_s: float | None = None) -> "aioredis.Redis":
    """A client for ``url``. Pass ``blocking_read_s`` for a connection that runs blocking reads
    (XREAD/XREADGROUP BLOCK): its socket timeout must exceed the block time."""
    timeout = COMMAND_TIMEOUT_S if blocking_read_s is None else blocking_read_s + COMMAND_TIMEOUT_S
    options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": COMMAND_TIMEOUT_S,
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "health_check_interval": 30,
    }
    if is_sentinel(url):
        target = parse_sentinel_url(url)
        sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=_sentinel_options(target))  # type: ignore[no-untyped-call]
        client: aioredis.Redis = sentinel.master_for(target.master, **_master_options(target), **options)
        return client
    return aioredis.Redis.from_url(url, **options)


def connect_sync(url: str, *, timeout_s: float) -> "redis.Redis":
    """A blocking client for ``url`` (the CLI), with ``timeout_s`` for connecting and each command."""
    options: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if is_sentinel(url):
        target = parse_sentinel_url(url)
        sentinel = SyncSentinel(list(target.sentinels), sentinel_kwargs=_sentinel_options(target))  # type: ignore[no-untyped-call]
        retry = SyncRetry(ExponentialBackoff(cap=1.0, base=0.05), retries=3)
        client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
            target.master, retry=retry, **_master_options(target), **options
        )
        return client
    return redis.Redis.from_url(url, **options)


def _sentinel_options(target: SentinelTarget) -> dict[str, Any]:
    """How to talk to the Sentinels themselves."""
    options: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    if target.sentinel_password:
        options["password"] = target.sentinel_password
    return options


def _master_options(target: SentinelTarget) -> dict[str, Any]:
    return {"db": target.db, "username": target.username, "password": target.password}
