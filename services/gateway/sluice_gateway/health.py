"""Health as the gateway reports it: TorchServe's Ping text and model health, and Redis readiness."""

import asyncio
import json

from sluice import keys, registry
from sluice.control_redis import ControlRedis
from sluice.log import get_logger
from sluice.redis_errors import RedisError

log = get_logger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def health_text(healthy: bool) -> str:
    """TorchServe's Ping body: 2-space pretty JSON ``{"status": "Healthy"}``."""
    return json.dumps({"status": HEALTHY if healthy else UNHEALTHY}, indent=2)


def version_healthy(min_workers: int, live_workers: int) -> bool:
    return live_workers >= min_workers


class ModelHealth:
    """TorchServe's rule: healthy unless some model's default version has fewer live workers than
    its min_workers. Redis unreachable counts as unhealthy."""

    def __init__(self, redis: ControlRedis) -> None:
        self._redis = redis

    async def healthy(self) -> bool:
        try:
            return await self._all_default_versions_healthy()
        except RedisError as exc:
            log.warning("model health unknown: Redis unreachable", error=str(exc))
            return False

    async def _all_default_versions_healthy(self) -> bool:
        for raw_name in await self._redis.zrange(keys.MODELS, 0, -1):
            model = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
            default, _versions = await registry.model_versions(self._redis, model)
            if default is None:
                continue
            record = await registry.get_version(self._redis, model, default)
            if record is None:
                continue
            live = await registry.live_workers(self._redis, model, default)
            if not version_healthy(record.min_workers, len(live)):
                return False
        return True


async def redis_answers(redis: ControlRedis, timeout_s: float) -> bool:
    """Whether Redis answers a PING within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            return bool(await redis.ping())
    except (RedisError, TimeoutError, OSError):
        return False
