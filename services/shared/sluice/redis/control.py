"""The gateway's control-plane Redis client: registry and key reads, health probes, the reply-stream
script and registry events (pub/sub), on Sluice's pipelined connection (:mod:`sluice.redis.pipelined`).

It offers the part of redis-py's asyncio API that the gateway and the shared registry and key-store
modules call, with the same names and reply types (bytes, ``dict`` for HGETALL, ``True`` for PING),
so those modules serve the manager's redis-py client and this one alike. Failures are
:mod:`sluice.redis.errors`. Why not redis-py in the gateway: importing any of it loads all of it,
~6 MiB of the gateway's 60 MiB memory target.

Unlike the redis-py clients of the other services, a command is not retried after a lost
connection: the gateway's callers answer UNAVAILABLE or try again on their next round, as the hot
path's client already does.
"""

import asyncio
import hashlib
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.link import RedisLink, open_link
from sluice.redis.pipelined import PipelinedRedis
from sluice.redis.resp import Arg
from sluice.redis.slots import command_key

COMMAND_TIMEOUT_S = 5.0

Convert = Callable[[Any], Any]


def _same(reply: Any) -> Any:
    return reply


def _pairs(reply: Any) -> dict[bytes, bytes]:
    flat = reply or []
    return dict(zip(flat[::2], flat[1::2], strict=True))


class ControlRedis:
    """One connection, opened on first use and again after a loss."""

    def __init__(self, url: str, *, timeout_s: float = COMMAND_TIMEOUT_S, name: str = "control") -> None:
        self._url = url
        self._timeout_s = timeout_s
        self._name = name
        self._link = open_link(url, timeout_s=timeout_s, name=name)

    async def get(self, name: str) -> bytes | None:
        reply: bytes | None = await self._link.send("GET", name)
        return reply

    async def hget(self, name: str, key: str) -> bytes | None:
        reply: bytes | None = await self._link.send("HGET", name, key)
        return reply

    async def hgetall(self, name: str) -> dict[bytes, bytes]:
        return _pairs(await self._link.send("HGETALL", name))

    async def hmget(self, name: str, *keys: str) -> list[bytes | None]:
        reply: list[bytes | None] = await self._link.send("HMGET", name, *keys)
        return reply

    async def hsetnx(self, name: str, key: str, value: str) -> int:
        reply: int = await self._link.send("HSETNX", name, key, value)
        return reply

    async def hdel(self, name: str, *keys: str) -> int:
        reply: int = await self._link.send("HDEL", name, *keys)
        return reply

    async def hkeys(self, name: str) -> list[bytes]:
        reply: list[bytes] = await self._link.send("HKEYS", name)
        return reply

    async def zrange(self, name: str, start: int, end: int) -> list[bytes]:
        reply: list[bytes] = await self._link.send("ZRANGE", name, start, end)
        return reply

    async def exists(self, *names: str) -> int:
        reply: int = await self._link.send("EXISTS", *names)
        return reply

    async def delete(self, *names: str) -> int:
        reply: int = await self._link.send("DEL", *names)
        return reply

    async def ping(self) -> bool:
        return bool(await self._link.send("PING") in (b"PONG", "PONG"))

    def pipeline(self, transaction: bool = True) -> "Batch":
        """Commands queued on the returned batch leave together when it is executed (in MULTI/EXEC
        when ``transaction``); its ``execute`` returns their replies in order and raises the first
        failure, as redis-py's pipeline does."""
        return Batch(self._link, transaction=transaction)

    def register_script(self, script: str) -> "Script":
        return Script(self._link, script)

    def pubsub(self) -> "Subscription":
        """A subscriber on a connection of its own (a subscribed connection takes no other command)."""
        return Subscription(self._url, timeout_s=self._timeout_s, name=f"{self._name}-events")

    async def aclose(self) -> None:
        await self._link.close()


class Batch:
    def __init__(self, link: RedisLink, *, transaction: bool) -> None:
        self._link = link
        self._transaction = transaction
        self._commands: list[tuple[tuple[Arg, ...], Convert]] = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._commands.clear()

    def exists(self, *names: str) -> Self:
        return self._queue(("EXISTS", *names))

    def hkeys(self, name: str) -> Self:
        return self._queue(("HKEYS", name))

    def hgetall(self, name: str) -> Self:
        return self._queue(("HGETALL", name), _pairs)

    def xlen(self, name: str) -> Self:
        return self._queue(("XLEN", name))

    def delete(self, *names: str) -> Self:
        return self._queue(("DEL", *names))

    def hdel(self, name: str, *fields: str) -> Self:
        return self._queue(("HDEL", name, *fields))

    def hset(self, name: str, *, mapping: Mapping[Any, Any]) -> Self:
        """(Typed loosely: callers build the mapping with redis-py's field and value types.)"""
        flat = [part for field, value in mapping.items() for part in (field, value)]
        return self._queue(("HSET", name, *flat))

    async def execute(self) -> list[Any]:
        commands, self._commands = self._commands, []
        if not commands:
            return []
        if self._transaction:
            replies = await self._in_transaction([args for args, _ in commands])
        else:
            replies = await _gather([self._link.send(*args) for args, _ in commands])
        return [convert(reply) for reply, (_, convert) in zip(replies, commands, strict=True)]

    async def _in_transaction(self, commands: list[tuple[Arg, ...]]) -> list[Any]:
        # On a Cluster, the connection to the master of the commands' slot (they must share one).
        key = next((found for args in commands if (found := command_key(args)) is not None), None)
        link = self._link if key is None else await self._link.node_for(_text(key))
        # All sent in this loop turn, so they leave in one write, MULTI first.
        queued = [link.send("MULTI"), *(link.send(*args) for args in commands)]
        done = link.send("EXEC")
        await _gather(queued)
        replies: list[Any] | None = await done
        if replies is None:
            raise ReplyError("EXECABORT: the transaction was aborted")
        for reply in replies:
            if isinstance(reply, ReplyError):
                raise reply
        return replies

    def _queue(self, args: tuple[Arg, ...], convert: Convert = _same) -> Self:
        self._commands.append((args, convert))
        return self


class Script:
    """A Lua script called by digest (loaded with EVAL when Redis does not know it)."""

    def __init__(self, link: RedisLink, script: str) -> None:
        self._link = link
        self._script = script
        self._sha = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        return await self._link.evalsha(self._sha, self._script, list(keys), list(args))


class Subscription:
    """redis-py's ``PubSub`` as the gateway uses it: ``subscribe``, then ``get_message`` returning
    ``{"type", "channel", "data"}`` dicts (``subscribe`` confirmations included) or None."""

    def __init__(self, url: str, *, timeout_s: float, name: str) -> None:
        # None: the connection was lost (wakes a waiting get_message).
        self._messages: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._lost: Exception | None = None
        self._link = PipelinedRedis(
            url, timeout_s=timeout_s, name=name, on_push=self._pushed, on_lost=self._gone
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self._link.close()

    async def subscribe(self, *channels: str) -> None:
        """Subscribe; the confirmations arrive through :meth:`get_message`."""
        for channel in channels:
            self._pushed(await self._link.send("SUBSCRIBE", channel))

    async def ping(self) -> None:
        """Prove the connection alive: a reply overdue past the client's timeout drops it (the next
        :meth:`get_message` raises RedisDown), as a master that died without a TCP reset would leave
        it silent forever. A message that arrives in place of the pong is delivered as a message."""
        reply = await self._link.send("PING")
        self._pushed(reply)  # a message that came first (the pong itself is no message: dropped)

    async def get_message(self, timeout: float) -> dict[str, Any] | None:  # noqa: ASYNC109 (redis-py's signature)
        """The next message, None after ``timeout`` seconds without one; RedisDown once the
        connection is gone (subscribe again on a new Subscription)."""
        if self._lost is None:
            try:
                message = await asyncio.wait_for(self._messages.get(), timeout)
            except TimeoutError:
                return None
            if message is not None:
                return message
        raise RedisDown(str(self._lost))

    def _pushed(self, reply: Any) -> None:
        if not isinstance(reply, list) or len(reply) != 3:
            return
        kind, channel, data = reply
        self._messages.put_nowait({"type": _text(kind), "channel": channel, "data": data})

    def _gone(self, error: Exception) -> None:
        self._lost = error
        self._messages.put_nowait(None)


async def _gather(futures: "list[asyncio.Future[Any]]") -> list[Any]:
    """Every reply, after all of them arrived; the first failure is raised."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
