"""Redis connections for every service: one place for timeouts, retries and the hiredis parser."""

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Socket timeout for ordinary commands; blocking reads use their own (longer) client.
COMMAND_TIMEOUT_S = 5.0


def connect(url: str, *, blocking_read_s: float | None = None) -> "aioredis.Redis":
    """A client for ``url``. Pass ``blocking_read_s`` for a connection that runs blocking reads
    (XREAD/XREADGROUP BLOCK): its socket timeout must exceed the block time."""
    timeout = COMMAND_TIMEOUT_S if blocking_read_s is None else blocking_read_s + COMMAND_TIMEOUT_S
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=COMMAND_TIMEOUT_S,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        health_check_interval=30,
    )
    return client
