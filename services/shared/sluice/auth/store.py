"""The keys every API process checks tokens against, kept in Redis so that all processes and replicas
share them: only SHA-256 digests and expiry times (``keys.AUTH_KEYS``), never a plaintext key.

:func:`judge` is the decision, a pure function: the presented token is hashed and compared with
``hmac.compare_digest`` against every stored digest, always all of them, so the time taken does not
depend on which key (if any) it matched. :class:`TokenVerifier` feeds it a cached snapshot.
"""

import asyncio
import enum
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.auth.key_material import Key, KeyKind, KeySet, digest
from sluice.log import get_logger
from sluice.redis import errors as redis_errors
from sluice.redis import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.typing import EncodableT, FieldT

    from sluice.redis.control import ControlRedis

log = get_logger(__name__)

# A token longer than this is refused without hashing it.
MAX_TOKEN_CHARS = 1024
_WARN_EVERY_S = 30.0


class Verdict(enum.Enum):
    GRANTED = "granted"
    # No token, or not in the "Bearer <token>" form.
    MISSING = "missing"
    # A token that is no key (or no keys exist yet).
    INVALID = "invalid"
    EXPIRED = "expired"
    # A valid key of another scope (e.g. the inference key on the management API).
    WRONG_SCOPE = "wrong_scope"
    # The keys cannot be read (Redis unreachable and nothing read before).
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class StoredKey:
    digest: str
    expires_unix_ms: int | None = None


StoredKeys = dict[KeyKind, StoredKey]


def judge(stored: StoredKeys, kind: KeyKind, token: str | None, now_unix_ms: int) -> Verdict:
    if token is None:
        return Verdict.MISSING
    if len(token) > MAX_TOKEN_CHARS:
        return Verdict.INVALID
    presented = digest(token)
    matched = [other for other, key in stored.items() if hmac.compare_digest(presented, key.digest)]
    if kind in matched:
        expires = stored[kind].expires_unix_ms
        return Verdict.EXPIRED if expires is not None and now_unix_ms >= expires else Verdict.GRANTED
    return Verdict.WRONG_SCOPE if matched else Verdict.INVALID


def _expiry_field(kind: KeyKind) -> str:
    return f"{kind.value}_expires_ms"


class TokenStore:
    """Reads and writes ``keys.AUTH_KEYS``."""

    def __init__(self, redis: "aioredis.Redis | ControlRedis") -> None:
        self._redis = redis

    async def load(self) -> StoredKeys:
        raw = await self._redis.hgetall(keys.AUTH_KEYS)
        fields = {_text(name): _text(value) for name, value in raw.items()}
        stored: StoredKeys = {}
        for kind in KeyKind:
            found = fields.get(kind.value)
            if found:
                expires = fields.get(_expiry_field(kind))
                stored[kind] = StoredKey(found, int(expires) if expires else None)
        return stored

    async def install(self, keyset: KeySet) -> None:
        """Replace every key at once."""
        mapping: dict[FieldT, EncodableT] = {}
        for kind in KeyKind:
            mapping.update(_fields(kind, keyset.get(kind)))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.AUTH_KEYS)
            pipe.hset(keys.AUTH_KEYS, mapping=mapping)
            await pipe.execute()

    async def put(self, kind: KeyKind, key: Key) -> None:
        """Replace one key (its old value stops working)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.AUTH_KEYS, _expiry_field(kind))
            pipe.hset(keys.AUTH_KEYS, mapping=_fields(kind, key))
            await pipe.execute()


def _fields(kind: KeyKind, key: Key) -> "dict[FieldT, EncodableT]":
    fields: dict[FieldT, EncodableT] = {kind.value: digest(key.value)}
    if key.expires_unix_ms is not None:
        fields[_expiry_field(kind)] = str(key.expires_unix_ms)
    return fields


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class TokenVerifier:
    """Judges tokens against the stored keys, re-reading them at most every ``cache_s``.

    If Redis cannot be read, the last snapshot stays in use: keys only change through Redis, and
    expiry times are checked against the clock on every call."""

    def __init__(
        self,
        store: TokenStore,
        *,
        cache_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._cache_s = cache_s
        self._clock = clock
        self._monotonic = monotonic
        self._snapshot: StoredKeys | None = None
        self._read_at: float | None = None
        self._lock = asyncio.Lock()
        self._warned_at = -_WARN_EVERY_S

    async def verify(self, kind: KeyKind, token: str | None) -> Verdict:
        if token is None:
            return Verdict.MISSING
        stored = await self._stored()
        if stored is None:
            return Verdict.UNAVAILABLE
        if not stored:
            self._warn("no token keys in Redis yet: the manager creates them at startup")
        return judge(stored, kind, token, int(self._clock() * 1000))

    def invalidate(self) -> None:
        """Forget the snapshot (after this process changed a key)."""
        self._read_at = None

    def _fresh(self) -> bool:
        return self._read_at is not None and self._monotonic() - self._read_at < self._cache_s

    async def _stored(self) -> StoredKeys | None:
        if self._fresh():
            return self._snapshot
        if self._cache_s == 0:
            await self._refresh()
            return self._snapshot
        async with self._lock:  # one read refreshes the snapshot for every waiting call
            if not self._fresh():
                await self._refresh()
            return self._snapshot

    async def _refresh(self) -> None:
        unreadable: tuple[type[BaseException], ...] = (*redis_errors.failures(), OSError)
        try:
            self._snapshot = await self._store.load()
        except unreadable as exc:
            self._warn("token keys unreadable; using the last keys read", error=str(exc))
        # Also after a failure: the next read is tried after cache_s, not on every call.
        self._read_at = self._monotonic()

    def _warn(self, message: str, **fields: str) -> None:
        now = self._monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning(message, **fields)
