"""Reading the model registry in Redis (gateways, workers and the manager; the manager writes it
through :class:`sluice.registry.store.RegistryStore`).

Version resolution is a pure function (:func:`choose_version`) so it can be tested without Redis.
"""

from typing import TYPE_CHECKING

from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.registry.records import VersionRecord, WorkerRecord

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from sluice.redis.control import ControlRedis

    # The readers serve the gateway's client and the other services' redis-py client.
    AnyRedis = aioredis.Redis | ControlRedis

RECORD_FIELD = "record"
DEFAULT_FIELD = "default"
VERSION_FIELD_PREFIX = "v:"


def choose_version(model: str, requested: str, default: str | None, versions: set[str]) -> str:
    """The version a request for ``model``/``requested`` runs on, or the TorchServe error."""
    if not versions:
        raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
    if not requested:
        if default is None:
            raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
        return default
    if requested not in versions:
        raise SluiceError(
            ErrorCode.VERSION_NOT_FOUND, f"Model version: {requested} does not exist for model: {model}"
        )
    return requested


async def model_versions(redis: "AnyRedis", model: str) -> tuple[str | None, set[str]]:
    """(default version, all versions) of ``model``; (None, set()) when it is not registered."""
    raw = await redis.hgetall(keys.model(model))
    default: str | None = None
    versions: set[str] = set()
    for field, value in raw.items():
        name = _text(field)
        if name == DEFAULT_FIELD:
            default = _text(value)
        elif name.startswith(VERSION_FIELD_PREFIX):
            versions.add(name[len(VERSION_FIELD_PREFIX) :])
    return default, versions


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def resolve_version(redis: "AnyRedis", model: str, requested: str) -> str:
    default, versions = await model_versions(redis, model)
    return choose_version(model, requested, default, versions)


async def get_version(redis: "AnyRedis", model: str, version: str) -> VersionRecord | None:
    raw = await redis.hget(keys.version_config(model, version), RECORD_FIELD)
    return None if raw is None else VersionRecord.from_json(raw)


async def live_workers(redis: "AnyRedis", model: str, version: str) -> list[WorkerRecord]:
    """Workers of a version that announced themselves and whose heartbeat has not expired."""
    raw = await redis.hgetall(keys.workers(model, version))
    records = [WorkerRecord.from_json(value) for value in raw.values()]
    if not records:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for record in records:
            pipe.exists(keys.heartbeat(model, version, record.worker_id))
        alive = await pipe.execute()
    return [record for record, is_alive in zip(records, alive, strict=True) if is_alive]


async def next_worker_id(redis: "aioredis.Redis") -> str:
    """A fresh worker id from the shared counter: "9000", "9001", ... (TorchServe numbers workers so).
    The manager and self-numbering workers both take ids here, so ids never collide."""
    count = int(await redis.incr(keys.WORKER_SEQ))
    return str(keys.FIRST_WORKER_ID + count - 1)
