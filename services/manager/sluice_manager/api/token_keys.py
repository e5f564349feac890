"""The manager's side of token authorization: it creates the keys at startup, renews them on
``/token`` and keeps the key file (the operator's copy, mode 0600) in step with Redis.

Startup (:meth:`KeyAuthority.prepare`): if the key file holds the keys Redis knows (same digests),
they are kept and any expired one is renewed, so a manager restart does not lock clients out.
Otherwise (first start, the file was removed by ``sluice stop``, a new container) three fresh keys
are written to the file first, then their digests to Redis. Several managers sharing one Redis must
share the key file too (same path on a shared volume): a manager that finds no matching file starts
a new key set.
"""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from sluice.auth.key_material import (
    EXPIRING,
    Key,
    KeyKind,
    KeySet,
    digest,
    new_key,
    read_key_file,
    write_key_file,
)
from sluice.auth.store import StoredKeys, TokenStore
from sluice.log import get_logger

log = get_logger(__name__)


def file_matches(keyset: KeySet, stored: StoredKeys) -> bool:
    return all(kind in stored and stored[kind].digest == digest(keyset.get(kind).value) for kind in KeyKind)


class KeyAuthority:
    def __init__(
        self,
        store: TokenStore,
        key_file: Path,
        *,
        expiration_min: float,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self.key_file = key_file.absolute()
        self._expiration_min = expiration_min
        self._on_change = on_change
        self._clock = clock
        self._lock = asyncio.Lock()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def prepare(self) -> KeySet:
        """Make sure valid keys exist in Redis and in the key file; returns them."""
        async with self._lock:
            on_file = await asyncio.to_thread(read_key_file, self.key_file)
            stored = await self._store.load()
            if on_file is not None and file_matches(on_file, stored):
                keyset = await self._renew_expired(on_file)
                log.info(
                    "token authorization on; keeping the keys in the key file", key_file=str(self.key_file)
                )
                return keyset
            keyset = KeySet.generate(self._now_ms(), self._expiration_min)
            await asyncio.to_thread(write_key_file, self.key_file, keyset)
            await self._store.install(keyset)
            self._on_change()
        log.info("token authorization on; new keys written to the key file", key_file=str(self.key_file))
        return keyset

    async def _renew_expired(self, keyset: KeySet) -> KeySet:
        now = self._now_ms()
        renewed = [kind for kind in EXPIRING if keyset.get(kind).expired(now)]
        for kind in renewed:
            keyset = keyset.with_key(kind, new_key(kind, now, self._expiration_min))
        if renewed:
            await asyncio.to_thread(write_key_file, self.key_file, keyset)
            for kind in renewed:
                await self._store.put(kind, keyset.get(kind))
            self._on_change()
            log.info("expired keys renewed at startup", kinds=[kind.value for kind in renewed])
        return keyset

    async def rotate(self, kind: KeyKind) -> Key:
        """A new key of ``kind`` (inference or management): the old one stops working."""
        if kind not in EXPIRING:
            raise ValueError(f"the {kind.value} key cannot be renewed")
        async with self._lock:
            key = new_key(kind, self._now_ms(), self._expiration_min)
            on_file = await asyncio.to_thread(read_key_file, self.key_file)
            if on_file is not None:
                await asyncio.to_thread(write_key_file, self.key_file, on_file.with_key(kind, key))
            else:
                log.warning("key file missing: the renewed key is only in the /token answer",
                            key_file=str(self.key_file))  # fmt: skip
            await self._store.put(kind, key)
            self._on_change()
        log.info("key renewed", kind=kind.value)
        return key
