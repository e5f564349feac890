"""Redis connections for every service: one place for timeouts, retries and the hiredis parser.

A ``redis+sentinel://`` URL (:mod:`sluice.redis.target`) gives a client of the master that redis-py
finds through the Sentinels: each new connection asks them, and a connection that meets a replica
(a master demoted by a failover) is dropped and retried on the new master.

A ``redis+cluster://`` URL gives redis-py's Cluster client, which routes each command to the master
of its key's slot and follows redirections. It is returned typed as the plain client: it offers the
same commands Sluice calls, with two differences its callers mind: a transaction's keys must share
one slot (:func:`sluice.redis.writes.ordered_writes` writes across slots), and commands of a
non-transactional pipeline are ordered only within one slot.
"""

from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode as SyncClusterNode
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry as SyncRetry
from redis.sentinel import Sentinel as SyncSentinel

from sluice.redis.target import SentinelTarget, is_cluster, is_sentinel, parse_cluster_url, parse_sentinel_url

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
    if is_cluster(url):
        nodes = parse_cluster_url(url)
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes.seeds],
            username=nodes.username,
            password=nodes.password,
            **options,
        )
        return cast(aioredis.Redis, cluster)
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
    if is_cluster(url):
        nodes = parse_cluster_url(url)
        cluster = SyncRedisCluster(
            startup_nodes=[SyncClusterNode(host, port) for host, port in nodes.seeds],  # type: ignore[no-untyped-call]
            username=nodes.username,
            password=nodes.password,
            **options,
        )
        return cast(redis.Redis, cluster)
    return redis.Redis.from_url(url, **options)


def _sentinel_options(target: SentinelTarget) -> dict[str, Any]:
    """How to talk to the Sentinels themselves."""
    options: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    if target.sentinel_password:
        options["password"] = target.sentinel_password
    return options


def _master_options(target: SentinelTarget) -> dict[str, Any]:
    return {"db": target.db, "username": target.username, "password": target.password}
