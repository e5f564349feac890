"""Writes that belong together, on whichever Redis a client talks to.

On one Redis (also through Sentinel) they are one ``MULTI``/``EXEC``: no reader sees part of them.
A Redis Cluster runs a transaction only on keys of one slot, and the registry's and the operations'
writes span slots (the model list, a model's hash, a version's record). There they are written one
after another in the order given, each command atomic on its own; the callers order them so that a
reader of a part finds what it refers to, and so that the step that announces a change (``PUBLISH``)
comes last and a retried write finishes what a crashed one began.
"""

import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.client import Pipeline


def talks_to_cluster(client: object) -> bool:
    """Whether ``client`` is one of redis-py's Cluster clients (loaded only once some code made one)."""
    modules = (sys.modules.get("redis.asyncio.cluster"), sys.modules.get("redis.cluster"))
    return any(module is not None and isinstance(client, module.RedisCluster) for module in modules)


def ordered_writes(client: "aioredis.Redis") -> "Pipeline | InOrder":
    """A transaction on one Redis; on a Cluster, commands run one by one in order at ``execute``."""
    if talks_to_cluster(client):
        return InOrder(client)
    return client.pipeline(transaction=True)


class InOrder:
    """The part of redis-py's pipeline the multi-slot writes use, run command by command."""

    def __init__(self, client: "aioredis.Redis") -> None:
        self._client = client
        self._commands: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._commands.clear()

    def hset(self, name: str, key: str | None = None, value: Any = None, mapping: Any = None) -> Self:
        return self._queue("hset", name, key=key, value=value, mapping=mapping)

    def hsetnx(self, name: str, key: str, value: Any) -> Self:
        return self._queue("hsetnx", name, key, value)

    def hdel(self, name: str, *keys: str) -> Self:
        return self._queue("hdel", name, *keys)

    def zadd(self, name: str, mapping: Any) -> Self:
        return self._queue("zadd", name, mapping)

    def zrem(self, name: str, *values: Any) -> Self:
        return self._queue("zrem", name, *values)

    def set(self, name: str, value: Any, ex: int | None = None) -> Self:
        return self._queue("set", name, value, ex=ex)

    def sadd(self, name: str, *values: Any) -> Self:
        return self._queue("sadd", name, *values)

    def srem(self, name: str, *values: Any) -> Self:
        return self._queue("srem", name, *values)

    def delete(self, *names: str) -> Self:
        return self._queue("delete", *names)

    def publish(self, channel: str, message: Any) -> Self:
        return self._queue("publish", channel, message)

    async def execute(self) -> list[Any]:
        """Each command's reply, in order; the first failure stops the rest and is raised."""
        commands, self._commands = self._commands, []
        return [await getattr(self._client, name)(*args, **options) for name, args, options in commands]

    def _queue(self, name: str, *args: Any, **options: Any) -> Self:
        self._commands.append((name, args, options))
        return self
