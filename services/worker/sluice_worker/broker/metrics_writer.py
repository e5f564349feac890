"""Writes what handlers recorded through ``context.metrics`` (:class:`ModelMetrics`) into the version's
handler-metrics hash (:mod:`sluice.handler_metrics`) every ``interval_s``, and once more when the worker
stops: one pipelined round trip per interval whatever the number of requests, on the control connection
(the hot path never waits for it). Values whose write failed are kept for the next one."""

import asyncio
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sluice.log import get_logger
from sluice.redis import keys

from sluice_worker.model_metrics import ModelMetrics

log = get_logger(__name__)

INTERVAL_S = 1.0


class MetricsWriter:
    def __init__(
        self,
        redis: "aioredis.Redis",
        model: str,
        version: str,
        metrics: ModelMetrics,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._redis = redis
        self._key = keys.handler_metrics(model, version)
        self._metrics = metrics
        self._interval_s = interval_s

    async def run(self) -> None:
        """Write every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(self._interval_s)
            await self.write()

    async def write(self) -> None:
        pending = self._metrics.take()
        if not pending:
            return
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for field, amount in pending.increments.items():
                    pipe.hincrbyfloat(self._key, field, amount)
                if pending.values:
                    values: Mapping[Any, Any] = pending.values
                    pipe.hset(self._key, mapping=values)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._metrics.put_back(pending)
            log.warning("handler metrics not written, will retry", error=str(exc))
