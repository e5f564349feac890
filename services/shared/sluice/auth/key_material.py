"""Token key material: generation, digests and the operator's ``key_file.json``.

Three keys, as in TorchServe: the *inference* key (inference APIs), the *management* key (management
APIs) and the *API* key (only for ``/token``, which renews the other two). Sluice's keys carry 256
random bits (TorchServe's carry 48). Redis holds only their SHA-256 digests and expiry times
(:mod:`sluice.auth.store`); the plaintext exists in the key file (mode 0600) and in the answer to
``/token``, nowhere else.

The file keeps TorchServe's shape, so scripts that read it keep working::

    {"management": {"key": "...", "expiration time": "2026-01-01T10:00:00.000000Z"},
     "inference": {"key": "...", "expiration time": "..."},
     "API": {"key": "..."}}
"""

import contextlib
import enum
import hashlib
import json
import os
import secrets
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

KEY_BYTES = 32
FILE_MODE = 0o600


class KeyKind(enum.StrEnum):
    INFERENCE = "inference"
    MANAGEMENT = "management"
    API = "api"


# Kinds whose keys expire (token_expiration_min) and can be renewed through /token.
EXPIRING = (KeyKind.INFERENCE, KeyKind.MANAGEMENT)
# Section names in key_file.json (TorchServe spells the API key's section in capitals).
FILE_SECTION = {KeyKind.INFERENCE: "inference", KeyKind.MANAGEMENT: "management", KeyKind.API: "API"}


def generate_key() -> str:
    """A fresh URL-safe key (no whitespace, so it fits ``Bearer <key>``)."""
    return secrets.token_urlsafe(KEY_BYTES)


def digest(key: str) -> str:
    """What Redis stores for a key. Keys are 256-bit random strings, so a plain SHA-256 suffices."""
    return hashlib.sha256(key.encode("utf-8", errors="surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Key:
    value: str
    # Unix time in ms after which the key is refused; None: never (the API key).
    expires_unix_ms: int | None = None

    def expired(self, now_unix_ms: int) -> bool:
        return self.expires_unix_ms is not None and now_unix_ms >= self.expires_unix_ms


def new_key(kind: KeyKind, now_unix_ms: int, expiration_min: float) -> Key:
    if kind is KeyKind.API:
        return Key(generate_key())
    return Key(generate_key(), now_unix_ms + int(expiration_min * 60_000))


@dataclass(frozen=True)
class KeySet:
    """The three keys in plaintext (what the key file holds)."""

    inference: Key
    management: Key
    api: Key

    @classmethod
    def generate(cls, now_unix_ms: int, expiration_min: float) -> "KeySet":
        return cls(*(new_key(kind, now_unix_ms, expiration_min) for kind in KeyKind))

    def get(self, kind: KeyKind) -> Key:
        key: Key = getattr(self, kind.value)  # field names are the kinds' values
        return key

    def with_key(self, kind: KeyKind, key: Key) -> "KeySet":
        return replace(self, **{kind.value: key})

    def to_json(self) -> dict[str, dict[str, str]]:
        document: dict[str, dict[str, str]] = {}
        for kind in (KeyKind.MANAGEMENT, KeyKind.INFERENCE, KeyKind.API):
            document[FILE_SECTION[kind]] = key_entry(self.get(kind))
        return document


def key_entry(key: Key) -> dict[str, str]:
    """One section of the key file: ``{"key"}``, plus ``"expiration time"`` for expiring keys."""
    entry = {"key": key.value}
    if key.expires_unix_ms is not None:
        entry["expiration time"] = format_instant(key.expires_unix_ms)
    return entry


def format_instant(unix_ms: int) -> str:
    """Java's ``Instant.toString()`` style, which TorchServe writes: ISO-8601 UTC with a Z."""
    moment = datetime.fromtimestamp(unix_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}Z"


def parse_instant(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def read_key_file(path: Path) -> KeySet | None:
    """The keys in ``path``; None if it is missing or not a key file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        return KeySet(*(_parse_entry(document[FILE_SECTION[kind]]) for kind in KeyKind))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _parse_entry(entry: Any) -> Key:
    value = entry["key"]
    if not isinstance(value, str) or not value:
        raise ValueError("no key")
    expires = entry.get("expiration time")
    return Key(value, parse_instant(expires) if isinstance(expires, str) else None)


def write_key_file(path: Path, keys: KeySet) -> None:
    """Write ``path`` atomically with mode 0600: a private temp file in the same folder, then a rename
    (a symlink planted at ``path`` is replaced, never followed)."""
    folder = path.parent if str(path.parent) else Path(".")
    text = json.dumps(keys.to_json(), indent=2) + "\n"
    handle, temp = tempfile.mkstemp(prefix=".key_file-", suffix=".tmp", dir=folder)
    try:
        os.fchmod(handle, FILE_MODE)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def remove_key_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
