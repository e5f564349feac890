"""Asking Redis Sentinels where their master is (``SENTINEL get-master-addr-by-name``), for Sluice's own
client (:mod:`sluice.redis.pipelined`, on every new connection) and for ``sluice start``'s preflight.

Sentinels are asked in turn, and the first that names the master answers. An address may be stale
for the few seconds a failover takes, which is why a client checks ``ROLE`` on the connection it
opens, and treats a replica's ``READONLY`` as a lost connection. redis-py's clients use redis-py's
own Sentinel support (:mod:`sluice.redis.client`).
"""

import asyncio
import socket
from typing import Any

import hiredis

from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.target import SentinelTarget


class NoMaster(RedisDown):
    """No Sentinel gave the master's address: none answered, or none knows a master by that name."""


def _command(*args: str) -> bytes:
    packed: bytes = hiredis.pack_command(args)  # type: ignore[arg-type]
    return packed


def _requests(target: SentinelTarget) -> tuple[bytes, int]:
    """The bytes sent to one Sentinel and how many replies they get."""
    commands: list[tuple[str, ...]] = [("AUTH", target.sentinel_password)] if target.sentinel_password else []
    commands.append(("SENTINEL", "get-master-addr-by-name", target.master))
    return b"".join(_command(*command) for command in commands), len(commands)


def _answer(target: SentinelTarget, where: str, replies: list[Any]) -> tuple[str, int] | str:
    """The master's address from one Sentinel's replies, or why it gave none."""
    for reply in replies:
        if isinstance(reply, ReplyError):
            return f"{where} refused: {reply}"
    address = replies[-1]
    if not address:
        return f"{where} knows no master named {target.master!r}"
    return address[0].decode(), int(address[1])


class _Replies:
    """The replies of one Sentinel, collected from the bytes read off its connection."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._parser = hiredis.Reader(replyError=ReplyError)
        self.replies: list[Any] = []

    def feed(self, data: bytes) -> bool:
        """Take ``data`` (EOFError when the connection closed); whether every reply is in."""
        if not data:
            raise EOFError("connection closed")
        self._parser.feed(data)
        while len(self.replies) < self._count and (reply := self._parser.gets()) is not False:
            self.replies.append(reply)
        return len(self.replies) == self._count


def _failure(target: SentinelTarget, reasons: list[str]) -> NoMaster:
    return NoMaster(f"no Redis Sentinel gave the address of {target.describe()}: {'; '.join(reasons)}")


async def master_address(target: SentinelTarget, timeout_s: float) -> tuple[str, int]:
    """The master's ``(host, port)``; :class:`NoMaster` naming every Sentinel's failure."""
    request, count = _requests(target)
    reasons: list[str] = []
    for host, port in target.sentinels:
        where = f"Sentinel {host}:{port}"
        writer = None
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(request)
                collected = _Replies(count)
                while not collected.feed(await reader.read(4096)):
                    pass
                replies = collected.replies
        except (OSError, TimeoutError, EOFError) as exc:
            reasons.append(f"{where}: {exc or type(exc).__name__}")
            continue
        finally:
            if writer is not None:
                writer.close()
        answer = _answer(target, where, replies)
        if isinstance(answer, tuple):
            return answer
        reasons.append(answer)
    raise _failure(target, reasons)


def master_address_sync(target: SentinelTarget, timeout_s: float) -> tuple[str, int]:
    """:func:`master_address` for a program without an event loop (``sluice start``)."""
    request, count = _requests(target)
    reasons: list[str] = []
    for host, port in target.sentinels:
        where = f"Sentinel {host}:{port}"
        try:
            with socket.create_connection((host, port), timeout=timeout_s) as connection:
                connection.sendall(request)
                collected = _Replies(count)
                while not collected.feed(connection.recv(4096)):
                    pass
                replies = collected.replies
        except (OSError, EOFError) as exc:
            reasons.append(f"{where}: {exc or type(exc).__name__}")
            continue
        answer = _answer(target, where, replies)
        if isinstance(answer, tuple):
            return answer
        reasons.append(answer)
    raise _failure(target, reasons)
