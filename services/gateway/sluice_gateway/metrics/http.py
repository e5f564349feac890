"""``GET /metrics`` on ``metrics_address``: Prometheus text format 0.0.4, ``?name[]=`` filtering, no
token (as in TorchServe). If Redis does not answer, the gateway's own counters are still served."""

from aiohttp import web
from sluice.control_redis import ControlRedis
from sluice.log import get_logger
from sluice.redis_errors import RedisError

from sluice_gateway.metrics import cluster
from sluice_gateway.metrics.exposition import CONTENT_TYPE, MetricFamily, render, select
from sluice_gateway.metrics.inference import InferenceMetrics

log = get_logger(__name__)


class MetricsRoutes:
    def __init__(self, inference: InferenceMetrics, redis: ControlRedis) -> None:
        self._inference = inference
        self._redis = redis

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.metrics)]

    async def metrics(self, request: web.Request) -> web.Response:
        families = self._inference.families() + await self._cluster()
        body = render(select(families, request.query.getall("name[]", [])))
        return web.Response(body=body.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})

    async def _cluster(self) -> list[MetricFamily]:
        try:
            return cluster.families(await cluster.read_stats(self._redis))
        except RedisError as exc:
            log.warning("cluster metrics unavailable: Redis unreachable", error=str(exc))
            return []
