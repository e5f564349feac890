"""Reading the model registry in Redis (gateways, workers and the manager; the manager writes it
through :class:`sluice.registry.store.RegistryStore`).

Version resolution is a pure function (:func:`choose_version`) so it can be tested without Redis.
A model's traffic weights (a canary: ``{"1.0": 90, "2.0": 10}``) send the calls that name no version
to its versions in proportion; without weights they go to the default version.
"""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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
WEIGHTS_FIELD = "weights"
VERSION_FIELD_PREFIX = "v:"
# Largest weight of one version (weights are relative: 90/10 and 9/1 split alike).
MAX_WEIGHT = 1_000_000


@dataclass(frozen=True)
class ModelRouting:
    """What routes a call that names a model: its default version, its versions and its weights."""

    default: str | None = None
    versions: frozenset[str] = frozenset()
    weights: Mapping[str, int] = field(default_factory=dict)


def check_weights(weights: Mapping[str, object]) -> dict[str, int]:
    """Weights as stored: whole numbers from 0 to MAX_WEIGHT, at least one above 0; ValueError with a
    client-safe message otherwise (an empty mapping is fine: it clears the weights)."""
    checked: dict[str, int] = {}
    for version, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
            raise ValueError(f"the weight of version {version} must be a whole number from 0 to {MAX_WEIGHT}")
        checked[str(version)] = weight
    if checked and not any(checked.values()):
        raise ValueError("at least one version needs a weight above 0")
    return checked


def weighted_version(
    weights: Mapping[str, int], versions: frozenset[str] | set[str], draw: float
) -> str | None:
    """The version ``draw`` (in [0, 1)) falls on, each version's share its weight over the total; only
    registered versions count. None when no registered version has a weight."""
    candidates = sorted(
        (version, weight) for version, weight in weights.items() if weight > 0 and version in versions
    )
    total = sum(weight for _version, weight in candidates)
    if total == 0:
        return None
    point = draw * total
    for version, weight in candidates:
        if point < weight:
            return version
        point -= weight
    return candidates[-1][0]


def stable_draw(key: str) -> float:
    """A draw in [0, 1) fixed by ``key`` (a sequence id): the same key always falls on one version
    while the weights stand."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def choose_version(
    model: str,
    requested: str,
    default: str | None,
    versions: set[str] | frozenset[str],
    weights: Mapping[str, int] | None = None,
    draw: float = 0.0,
) -> str:
    """The version a request for ``model``/``requested`` runs on, or the TorchServe error. A request
    that names no version follows the model's ``weights`` (``draw`` in [0, 1) picks), else the
    default."""
    if not versions:
        raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")
    if not requested:
        chosen = weighted_version(weights, versions, draw) if weights else None
        if chosen is not None:
            return chosen
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
    routing = await model_routing(redis, model)
    return routing.default, set(routing.versions)


async def model_routing(redis: "AnyRedis", model: str) -> ModelRouting:
    """The default version, the versions and the traffic weights of ``model`` (empty when it is not
    registered)."""
    raw = await redis.hgetall(keys.model(model))
    default: str | None = None
    versions: set[str] = set()
    weights: dict[str, int] = {}
    for field_name, value in raw.items():
        name = _text(field_name)
        if name == DEFAULT_FIELD:
            default = _text(value)
        elif name == WEIGHTS_FIELD:
            weights = _stored_weights(value)
        elif name.startswith(VERSION_FIELD_PREFIX):
            versions.add(name[len(VERSION_FIELD_PREFIX) :])
    return ModelRouting(default, frozenset(versions), weights)


def _stored_weights(value: bytes | str) -> dict[str, int]:
    try:
        loaded = json.loads(value)
        return check_weights(loaded) if isinstance(loaded, dict) else {}
    except ValueError:
        return {}


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
