"""KServe v2 readiness: the server is ready once the manager finished its startup and every startup model
has its minimum of live workers; a model version is ready while it has a live worker (and at least its
``min_workers``). Policies are pure; :class:`RegistryReadiness` does the Redis reads."""

from collections.abc import Mapping

from sluice import keys, registry
from sluice.control_redis import ControlRedis
from sluice.log import get_logger
from sluice.records import StartupReport
from sluice.redis_errors import RedisError

log = get_logger(__name__)


def startup_complete(report: StartupReport | None, live_workers: Mapping[tuple[str, str], int]) -> bool:
    """No report (no manager yet) or an unfinished one: not ready."""
    if report is None or not report.done:
        return False
    return all(
        live_workers.get((model.model_name, model.version), 0) >= model.min_workers for model in report.models
    )


def version_ready(min_workers: int, live_workers: int) -> bool:
    return live_workers >= max(1, min_workers)


class RegistryReadiness:
    def __init__(self, redis: ControlRedis) -> None:
        self._redis = redis

    async def startup_models_ready(self) -> bool:
        try:
            raw = await self._redis.get(keys.STARTUP_REPORT)
            report = None if raw is None else StartupReport.from_json(raw)
            live: dict[tuple[str, str], int] = {}
            for model in report.models if report is not None else []:
                workers = await registry.live_workers(self._redis, model.model_name, model.version)
                live[(model.model_name, model.version)] = len(workers)
        except (RedisError, ValueError) as exc:
            log.warning("startup readiness unknown", error=str(exc))
            return False
        return startup_complete(report, live)

    async def live_workers(self, model: str, version: str) -> int:
        return len(await registry.live_workers(self._redis, model, version))
