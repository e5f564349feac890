"""Redis Cluster's key slots: the slot a key hashes to (CRC16 of its hash tag, or of the whole key,
modulo 16384), which argument of a command is the key that decides where the command goes, and which
master serves each slot (from ``CLUSTER SLOTS``)."""

import binascii
from typing import Any

from sluice.redis.resp import Arg

SLOTS = 16384

# Commands that name no key: a Cluster client may send them to any node.
_KEYLESS = frozenset(
    {
        b"ASKING", b"AUTH", b"CLIENT", b"CLUSTER", b"COMMAND", b"DBSIZE", b"ECHO", b"EXEC", b"HELLO",
        b"INFO", b"MULTI", b"PING", b"PUBLISH", b"READONLY", b"ROLE", b"SCRIPT", b"SELECT",
        b"SUBSCRIBE", b"TIME", b"UNSUBSCRIBE", b"WAIT",
    }
)  # fmt: skip


def key_slot(key: bytes | str) -> int:
    """The slot of ``key``: only the part between the first ``{`` and the next ``}`` counts when
    that part is not empty (Redis's hash tags)."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


def _word(arg: Arg) -> bytes:
    if isinstance(arg, bytes):
        return arg.upper()
    return str(arg).encode().upper()


def command_key(args: tuple[Arg, ...]) -> bytes | str | None:
    """The key that routes ``args`` (its first; a Cluster refuses a command whose keys span
    slots), None for a command that names none."""
    name = _word(args[0])
    if name in _KEYLESS or len(args) < 2:
        return None
    if name in (b"EVAL", b"EVALSHA", b"EVAL_RO", b"EVALSHA_RO", b"FCALL", b"FCALL_RO"):
        return _as_key(args[3]) if int(args[2]) > 0 and len(args) > 3 else None
    if name in (b"XREAD", b"XREADGROUP"):
        words = [_word(arg) if isinstance(arg, bytes | str) else b"" for arg in args]
        at = words.index(b"STREAMS") if b"STREAMS" in words else -1
        return _as_key(args[at + 1]) if 0 <= at < len(args) - 1 else None
    return _as_key(args[1])


def _as_key(arg: Arg) -> bytes | str:
    return arg if isinstance(arg, bytes | str) else str(arg)


def slot_owners(reply: Any, asked_host: str) -> list[tuple[str, int]]:
    """Each slot's master ``(host, port)`` from a ``CLUSTER SLOTS`` reply of a node reached at
    ``asked_host``; ValueError when a slot has none (the cluster is not fully set up)."""
    owners: list[tuple[str, int] | None] = [None] * SLOTS
    for start, end, master, *_replicas in reply or []:
        host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
        # An empty or "?" endpoint: the master does not know its own address; it shares the host asked.
        address = (host if host not in ("", "?") else asked_host, int(master[1]))
        for slot in range(int(start), int(end) + 1):
            owners[slot] = address
    missing = sum(owner is None for owner in owners)
    if missing:
        raise ValueError(f"{missing} slots have no master (the cluster is not fully set up)")
    return [owner for owner in owners if owner is not None]
