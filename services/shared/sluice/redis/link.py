"""The pipelined client as its users see it, whether it talks to one Redis
(:class:`~sluice.redis.pipelined.PipelinedRedis`, also through Sentinel) or to a Redis Cluster
(:class:`~sluice.redis.cluster.ClusterRedis`); :func:`open_link` picks by URL."""

import asyncio
from typing import Any, Protocol

from sluice.redis.cluster import ClusterRedis
from sluice.redis.pipelined import DEFAULT_TIMEOUT_S, PipelinedRedis
from sluice.redis.resp import Arg
from sluice.redis.target import is_cluster


class RedisLink(Protocol):
    # Whether commands sent in one loop turn reach Redis in the order they were sent (one
    # connection), or only those to one slot do (a Cluster).
    @property
    def ordered(self) -> bool: ...

    def send(
        self, *args: Arg, timeout_s: float | None = None, payload: bool = False
    ) -> "asyncio.Future[Any]": ...

    async def execute(self, *args: Arg, timeout_s: float | None = None) -> Any: ...

    async def evalsha(
        self, sha: str, script: str, keys: list[str], args: list[Arg], *, payload: bool = False
    ) -> Any: ...

    async def node_for(self, key: str) -> PipelinedRedis: ...

    async def close(self) -> None: ...


def open_link(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, name: str = "redis") -> RedisLink:
    """A pipelined client of ``url``: of the Cluster it names, or of its one Redis."""
    if is_cluster(url):
        return ClusterRedis(url, timeout_s=timeout_s, name=name)
    return PipelinedRedis(url, timeout_s=timeout_s, name=name)
