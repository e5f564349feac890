"""Asking a Redis Cluster's nodes, without an event loop, where a slot lives: for the Celery broker's
connections (:mod:`sluice_manager.operations.cluster_transport`, on each new connection) and for
``sluice start``'s preflight. Nodes are asked in turn; the first that answers with a full map wins."""

from typing import Any

from sluice.redis.endpoint import Endpoint
from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.exchange import Command, exchange_sync
from sluice.redis.slots import slot_owners
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
        try:
            return slot_owners(replies[-1], host)[slot]
        except ValueError as exc:
            reasons.append(f"{host}:{port}: {exc}")
    raise NoSlotMap(f"no node of the {target.describe()} gave the slot map: {'; '.join(reasons)}")


def _ask(target: ClusterTarget, host: str, port: int, command: Command, timeout_s: float) -> list[Any]:
    """The replies to AUTH (when the target has a password) and ``command`` from one node; a refusal
    raises its ReplyError."""
    commands = [*Endpoint(username=target.username, password=target.password).handshake(), command]
    replies = exchange_sync(host, port, commands, timeout_s)
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise reply
    return replies
