"""In-memory stand-ins for the gateway's I/O seams (unit tests open no sockets)."""

import asyncio
from typing import Any

from sluice import keys, registry
from sluice.records import VersionRecord, VersionState
from sluice.redis_errors import RedisDown


class FakeRegistryRedis:
    """Just the hash reads the registry functions do, counting them."""

    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, str]] = {}
        self.reads = 0
        self.down = False
        self.gate: asyncio.Event | None = None

    def put(self, record: VersionRecord, *, default: bool = True) -> None:
        model = self.hashes.setdefault(keys.model(record.model_name), {})
        model[f"{registry.VERSION_FIELD_PREFIX}{record.version}"] = "0"
        if default or registry.DEFAULT_FIELD not in model:
            model[registry.DEFAULT_FIELD] = record.version
        self.hashes[keys.version_config(record.model_name, record.version)] = {
            registry.RECORD_FIELD: record.to_json(),
            "state": VersionState.ACTIVE.value,
        }

    async def _read(self) -> None:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise RedisDown("down")

    async def hgetall(self, key: str) -> dict[bytes, bytes]:
        await self._read()
        return {k.encode(): v.encode() for k, v in self.hashes.get(key, {}).items()}

    async def hget(self, key: str, field: str) -> Any:
        await self._read()
        value = self.hashes.get(key, {}).get(field)
        return None if value is None else value.encode()


def record(model: str = "echo", version: str = "1.0", **fields: Any) -> VersionRecord:
    return VersionRecord(
        model_name=model, version=version, model_url="m.mar", model_dir="/none", handler="h", **fields
    )
