"""Asking a Redis Cluster's nodes, without an event loop, where a slot lives: for the Celery broker's
connections (:mod:`sluice_manager.operations.cluster_transport`, on each new connection) and for
``sluice start``'s preflight. Nodes are asked in turn; the first that answers with a full map wins."""

import socket
from typing import Any

import hiredis

from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.resp import pack
from sluice.redis.slots import SLOTS
from sluice.redis.target import ClusterTarget


class NoSlotMap(RedisDown):
    """No node of the Cluster gave a map that serves every slot."""


def slot_owner_sync(target: ClusterTarget, slot: int, timeout_s: float) -> tuple[str, int]:
    """The ``(host, port)`` of the master serving ``slot``; :class:`NoSlotMap` naming each node's failure."""
    reasons: list[str] = []
    for host, port in target.seeds:
        try:
            replies = _ask(target, host, port, ("CLUSTER", "SLOTS"), timeout_s)
        except (OSError, EOFError, ReplyError) as exc:
            reasons.append(f"{host}:{port}: {exc or type(exc).__name__}")
            continue
        ranges = replies[-1] or []
        served = sum(int(end) - int(start) + 1 for start, end, *_ in ranges)
        if served != SLOTS:
            reasons.append(f"{host}:{port}: {SLOTS - served} slots have no master (cluster not ready)")
            continue
        for start, end, master, *_ in ranges:
            if int(start) <= slot <= int(end):
                owner = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
                return (owner if owner not in ("", "?") else host), int(master[1])
    raise NoSlotMap(f"no node of the {target.describe()} gave the slot map: {'; '.join(reasons)}")


def _ask(
    target: ClusterTarget, host: str, port: int, command: tuple[str, ...], timeout_s: float
) -> list[Any]:
    """The replies to AUTH (when the target has a password) and ``command`` from one node."""
    commands: list[tuple[str, ...]] = []
    if target.password is not None:
        commands.append(
            ("AUTH", target.password)
            if target.username is None
            else ("AUTH", target.username, target.password)
        )
    commands.append(command)
    parser = hiredis.Reader(replyError=ReplyError)
    replies: list[Any] = []
    with socket.create_connection((host, port), timeout=timeout_s) as connection:
        connection.sendall(b"".join(pack(each) for each in commands))
        while len(replies) < len(commands):
            data = connection.recv(65536)
            if not data:
                raise EOFError("connection closed")
            parser.feed(data)
            while (reply := parser.gets()) is not False:
                replies.append(reply)
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise reply
    return replies
