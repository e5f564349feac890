"""Asking Redis Sentinels where their master is (``SENTINEL get-master-addr-by-name``), for Sluice's own
client (:mod:`sluice.redis.pipelined`, on every new connection) and for ``sluice start``'s preflight.

Sentinels are asked in turn, and the first that names the master answers. An address may be stale
for the few seconds a failover takes, which is why a client checks ``ROLE`` on the connection it
opens, and treats a replica's ``READONLY`` as a lost connection. redis-py's clients use redis-py's
own Sentinel support (:mod:`sluice.redis.client`).
"""

from typing import Any

from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.exchange import Command, exchange, exchange_sync
from sluice.redis.target import SentinelTarget


class NoMaster(RedisDown):
    """No Sentinel gave the master's address: none answered, or none knows a master by that name."""


def _requests(target: SentinelTarget) -> list[Command]:
    """The commands sent to one Sentinel."""
    commands: list[Command] = [("AUTH", target.sentinel_password)] if target.sentinel_password else []
    commands.append(("SENTINEL", "get-master-addr-by-name", target.master))
    return commands


def _answer(target: SentinelTarget, where: str, replies: list[Any]) -> tuple[str, int] | str:
    """The master's address from one Sentinel's replies, or why it gave none."""
    for reply in replies:
        if isinstance(reply, ReplyError):
            return f"{where} refused: {reply}"
    address = replies[-1]
    if not address:
        return f"{where} knows no master named {target.master!r}"
    return address[0].decode(), int(address[1])


def _failure(target: SentinelTarget, reasons: list[str]) -> NoMaster:
    return NoMaster(f"no Redis Sentinel gave the address of {target.describe()}: {'; '.join(reasons)}")


async def master_address(target: SentinelTarget, timeout_s: float) -> tuple[str, int]:
    """The master's ``(host, port)``; :class:`NoMaster` naming every Sentinel's failure."""
    reasons: list[str] = []
    for host, port in target.sentinels:
        where = f"Sentinel {host}:{port}"
        try:
            replies = await exchange(host, port, _requests(target), timeout_s)
        except (OSError, TimeoutError, EOFError) as exc:
            reasons.append(f"{where}: {exc or type(exc).__name__}")
            continue
        answer = _answer(target, where, replies)
        if isinstance(answer, tuple):
            return answer
        reasons.append(answer)
    raise _failure(target, reasons)


def master_address_sync(target: SentinelTarget, timeout_s: float) -> tuple[str, int]:
    """:func:`master_address` for a program without an event loop (``sluice start``)."""
    reasons: list[str] = []
    for host, port in target.sentinels:
        where = f"Sentinel {host}:{port}"
        try:
            replies = exchange_sync(host, port, _requests(target), timeout_s)
        except (OSError, EOFError) as exc:
            reasons.append(f"{where}: {exc or type(exc).__name__}")
            continue
        answer = _answer(target, where, replies)
        if isinstance(answer, tuple):
            return answer
        reasons.append(answer)
    raise _failure(target, reasons)
