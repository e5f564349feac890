"""The gateway's view of the registry: model -> (default, versions) and version -> record, cached.

Misses are read through the broker's :class:`~sluice_gateway.broker.seam.ClusterReader`. Entries are
dropped when a registry event arrives (:mod:`sluice_gateway.broker.registry_events`) and, because
those are at-most-once, after a short TTL as well. Not-found answers are cached too, so unknown names
cost no broker read. Concurrent misses for one model share a single load.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from sluice.errors import ErrorCode, SluiceError
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord

from sluice_gateway.broker.seam import UNAVAILABLE_MESSAGE, BrokerUnavailable, ClusterReader

T = TypeVar("T")


class VersionResolver(Protocol):
    async def resolve(self, model: str, requested: str) -> VersionRecord: ...

    def invalidate(self, model: str | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class _ModelEntry:
    default: str | None
    versions: set[str]  # never mutated


def version_not_found(model: str, version: str) -> SluiceError:
    return SluiceError(
        ErrorCode.VERSION_NOT_FOUND, f"Model version: {version} does not exist for model: {model}"
    )


def model_not_found(model: str) -> SluiceError:
    return SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")


class RegistryCache:
    def __init__(
        self, reader: ClusterReader, *, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._reader = reader
        self._ttl_s = ttl_s
        self._clock = clock
        self._models: dict[str, tuple[float, _ModelEntry]] = {}
        self._records: dict[tuple[str, str], tuple[float, VersionRecord | None]] = {}
        self._loads: dict[tuple[str, ...], asyncio.Future[Any]] = {}
        # Bumped by every invalidation: a load that started before it must not store its result.
        self._generation = 0

    async def resolve(self, model: str, requested: str) -> VersionRecord:
        """The record of the version a request for ``model``/``requested`` runs on (``""``: the
        default), or MODEL_NOT_FOUND / VERSION_NOT_FOUND."""
        entry = await self._model(model)
        version = registry.choose_version(model, requested, entry.default, entry.versions)
        record = await self._record(model, version)
        if record is None:
            raise version_not_found(model, version) if requested else model_not_found(model)
        return record

    def invalidate(self, model: str | None = None) -> None:
        self._generation += 1
        if model is None:
            self._models.clear()
            self._records.clear()
            self._loads.clear()
            return
        self._models.pop(model, None)
        for key in [key for key in self._records if key[0] == model]:
            del self._records[key]
        # Loads already under way may return the old state: later callers start their own.
        for load_key in [key for key in self._loads if key[1] == model]:
            del self._loads[load_key]

    async def _model(self, model: str) -> _ModelEntry:
        cached = self._models.get(model)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        return await self._shared_load(("model", model), lambda: self._load_model(model))

    async def _record(self, model: str, version: str) -> VersionRecord | None:
        cached = self._records.get((model, version))
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        return await self._shared_load(("version", model, version), lambda: self._load_record(model, version))

    async def _load_model(self, model: str) -> _ModelEntry:
        generation = self._generation
        default, versions = await self._reader.model_versions(model)
        entry = _ModelEntry(default, versions)
        if generation == self._generation:
            self._models[model] = (self._clock() + self._ttl_s, entry)
        return entry

    async def _load_record(self, model: str, version: str) -> VersionRecord | None:
        generation = self._generation
        record = await self._reader.version_record(model, version)
        if generation == self._generation:
            self._records[(model, version)] = (self._clock() + self._ttl_s, record)
        return record

    async def _shared_load(self, key: tuple[str, ...], load: Callable[[], Awaitable[T]]) -> T:
        task = self._loads.get(key)
        if task is None:
            # A task, so that a caller that gives up does not cancel the load others wait for.
            task = asyncio.ensure_future(load())
            self._loads[key] = task
            task.add_done_callback(lambda done: self._load_done(key, done))
        try:
            return cast(T, await asyncio.shield(task))
        except BrokerUnavailable as exc:
            raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc

    def _load_done(self, key: tuple[str, ...], task: "asyncio.Future[Any]") -> None:
        if self._loads.get(key) is task:
            del self._loads[key]
        if not task.cancelled():
            task.exception()  # mark retrieved: a load whose callers all left must not warn
