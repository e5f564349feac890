"""The gateway's :class:`~.seam.ClusterReader` on Redis: registry and worker records through
:mod:`sluice.registry.reader` on the gateway's control connection, the metrics scrape through
:mod:`.redis_stats`. Redis failures leave as :class:`~.seam.BrokerUnavailable`."""

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sluice.redis import keys
from sluice.redis.control import ControlRedis
from sluice.redis.errors import RedisError
from sluice.registry import reader as registry
from sluice.registry import workflows
from sluice.registry.reader import ModelRouting
from sluice.registry.records import StartupReport, VersionRecord, WorkerRecord
from sluice.registry.workflows import WorkflowRecord

from sluice_gateway.broker import redis_stats
from sluice_gateway.broker.seam import BrokerUnavailable
from sluice_gateway.metrics.cluster import VersionStats


@contextmanager
def unavailable() -> Iterator[None]:
    """Redis failures inside the block leave as BrokerUnavailable."""
    try:
        yield
    except RedisError as exc:
        raise BrokerUnavailable(str(exc)) from exc


class RedisClusterReader:
    def __init__(self, redis: ControlRedis) -> None:
        self._redis = redis

    async def model_names(self) -> list[str]:
        with unavailable():
            raw = await self._redis.zrange(keys.MODELS, 0, -1)
        return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]

    async def model_versions(self, model: str) -> tuple[str | None, set[str]]:
        with unavailable():
            return await registry.model_versions(self._redis, model)

    async def model_routing(self, model: str) -> ModelRouting:
        with unavailable():
            return await registry.model_routing(self._redis, model)

    async def sequence_version(self, model: str, versions: Sequence[str], sequence_id: str) -> str | None:
        with unavailable():
            async with self._redis.pipeline(transaction=False) as pipe:
                for version in versions:
                    pipe.exists(keys.sequence(model, version, sequence_id))
                found = await pipe.execute()
        return next((version for version, exists in zip(versions, found, strict=True) if exists), None)

    async def version_record(self, model: str, version: str) -> VersionRecord | None:
        with unavailable():
            return await registry.get_version(self._redis, model, version)

    async def live_workers(self, model: str, version: str) -> list[WorkerRecord]:
        with unavailable():
            return await registry.live_workers(self._redis, model, version)

    async def workflow(self, name: str) -> WorkflowRecord | None:
        with unavailable():
            return await workflows.get_workflow(self._redis, name)

    async def startup_report(self) -> StartupReport | None:
        with unavailable():
            raw = await self._redis.get(keys.STARTUP_REPORT)
        return None if raw is None else StartupReport.from_json(raw)

    async def version_stats(self) -> list[VersionStats]:
        with unavailable():
            return await redis_stats.read_stats(self._redis)

    async def answers(self, timeout_s: float) -> bool:
        """Whether Redis answers a PING within ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                return bool(await self._redis.ping())
        except (RedisError, TimeoutError, OSError):
            return False
