"""One-off questions to a Redis server (or a Sentinel) outside the pipelined client: a few commands on
a short-lived connection, and their replies. Used where a connection must be placed first (the master a
Sentinel names, the master of a Cluster slot) and by ``sluice start``'s preflight, which has no loop.

Error replies come back as :class:`~sluice.redis.errors.ReplyError` objects among the replies, for the
caller to judge; a connection that fails or closes early raises OSError or EOFError.
"""

import asyncio
import socket
from typing import Any

import hiredis

from sluice.redis.errors import ReplyError
from sluice.redis.resp import Arg, pack

Command = tuple[Arg, ...]


class _Replies:
    """The replies to ``count`` commands, collected from the bytes read off their connection."""

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


async def exchange(host: str, port: int, commands: list[Command], timeout_s: float) -> list[Any]:
    """The replies to ``commands`` from ``host:port`` (TimeoutError past ``timeout_s``)."""
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"".join(pack(command) for command in commands))
            collected = _Replies(len(commands))
            while not collected.feed(await reader.read(65536)):
                pass
            return collected.replies
    finally:
        if writer is not None:
            writer.close()


def exchange_sync(host: str, port: int, commands: list[Command], timeout_s: float) -> list[Any]:
    """:func:`exchange` for a program without an event loop (socket.timeout past ``timeout_s``)."""
    with socket.create_connection((host, port), timeout=timeout_s) as connection:
        connection.sendall(b"".join(pack(command) for command in commands))
        collected = _Replies(len(commands))
        while not collected.feed(connection.recv(65536)):
            pass
        return collected.replies
