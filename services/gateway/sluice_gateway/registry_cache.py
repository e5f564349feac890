"""The gateway's view of the registry: model -> (default, versions, traffic weights) and version ->
record, cached.

Misses are read through the broker's :class:`~sluice_gateway.broker.seam.ClusterReader`. Entries are
dropped when a registry event arrives (:mod:`sluice_gateway.broker.registry_events`) and, because
those are at-most-once, after a short TTL as well. Not-found answers are cached too, so unknown names
cost no broker read. Concurrent misses for one model share a single load.

A call that names no version of a model with traffic weights draws its version at random, in
proportion to the weights; a call of a sequence draws by its sequence id instead (one version per
sequence), and a sequence that already lives on a version stays there whatever the weights became.
"""

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

from sluice.errors import ErrorCode, SluiceError
from sluice.registry import reader as registry
from sluice.registry.reader import ModelRouting
from sluice.registry.records import VersionRecord
from sluice.registry.workflows import WorkflowRecord

from sluice_gateway.broker.seam import UNAVAILABLE_MESSAGE, BrokerUnavailable, ClusterReader, SequenceStep

T = TypeVar("T")


class VersionResolver(Protocol):
    async def resolve(
        self, model: str, requested: str, sequence: SequenceStep | None = None
    ) -> VersionRecord: ...

    def invalidate(self, model: str | None = None) -> None: ...


def version_not_found(model: str, version: str) -> SluiceError:
    return SluiceError(
        ErrorCode.VERSION_NOT_FOUND, f"Model version: {version} does not exist for model: {model}"
    )


def model_not_found(model: str) -> SluiceError:
    return SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found: {model}")


class RegistryCache:
    def __init__(
        self,
        reader: ClusterReader,
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self._reader = reader
        self._ttl_s = ttl_s
        self._clock = clock
        self._draw = draw
        self._models: dict[str, tuple[float, ModelRouting]] = {}
        self._records: dict[tuple[str, str], tuple[float, VersionRecord | None]] = {}
        self._workflows: dict[str, tuple[float, WorkflowRecord | None]] = {}
        self._loads: dict[tuple[str, ...], asyncio.Future[Any]] = {}
        # Bumped by every invalidation: a load that started before it must not store its result.
        self._generation = 0

    async def resolve(
        self, model: str, requested: str, sequence: SequenceStep | None = None
    ) -> VersionRecord:
        """The record of the version a request for ``model``/``requested`` runs on (``""``: the
        default, or by the model's traffic weights), or MODEL_NOT_FOUND / VERSION_NOT_FOUND."""
        routing = await self._model(model)
        if requested or not routing.weights:
            version = registry.choose_version(model, requested, routing.default, routing.versions)
        else:
            version = await self._weighted(model, routing, sequence)
        record = await self._record(model, version)
        if record is None:
            raise version_not_found(model, version) if requested else model_not_found(model)
        return record

    def invalidate(self, model: str | None = None) -> None:
        self._generation += 1
        if model is None:
            self._models.clear()
            self._records.clear()
            self._workflows.clear()
            self._loads.clear()
            return
        self._models.pop(model, None)
        self._workflows.pop(model, None)
        for key in [key for key in self._records if key[0] == model]:
            del self._records[key]
        # Loads already under way may return the old state: later callers start their own.
        for load_key in [key for key in self._loads if key[1] == model]:
            del self._loads[load_key]

    async def workflow(self, name: str) -> WorkflowRecord | None:
        """The registered workflow ``name`` (workflow events name it as their ``model``); None."""
        cached = self._workflows.get(name)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        return await self._shared_load(("workflow", name), lambda: self._load_workflow(name))

    async def _load_workflow(self, name: str) -> WorkflowRecord | None:
        generation = self._generation
        record = await self._reader.workflow(name)
        if generation == self._generation:
            self._workflows[name] = (self._clock() + self._ttl_s, record)
        return record

    async def _weighted(self, model: str, routing: ModelRouting, sequence: SequenceStep | None) -> str:
        """The version a call that names none runs on, by the model's weights."""
        if sequence is None:
            draw = self._draw()
        else:
            if not sequence.start:
                # Any version may hold it: its weight may have dropped to 0 since it started.
                candidates = sorted(routing.versions)
                try:
                    held = await self._reader.sequence_version(model, candidates, sequence.sequence_id)
                except BrokerUnavailable as exc:
                    raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc
                if held is not None:
                    return held
            draw = registry.stable_draw(sequence.sequence_id)
        return registry.choose_version(model, "", routing.default, routing.versions, routing.weights, draw)

    async def _model(self, model: str) -> ModelRouting:
        cached = self._models.get(model)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        return await self._shared_load(("model", model), lambda: self._load_model(model))

    async def _record(self, model: str, version: str) -> VersionRecord | None:
        cached = self._records.get((model, version))
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        return await self._shared_load(("version", model, version), lambda: self._load_record(model, version))

    async def _load_model(self, model: str) -> ModelRouting:
        generation = self._generation
        entry = await self._reader.model_routing(model)
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
