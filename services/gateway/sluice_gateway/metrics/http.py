"""``GET /metrics`` on ``metrics_address``: Prometheus text format 0.0.4, ``?name[]=`` filtering, no
token (as in TorchServe). If the broker does not answer, the gateway's own counters are still served."""

from aiohttp import web
from sluice.log import get_logger

from sluice_gateway.broker.seam import BrokerUnavailable, ClusterReader
from sluice_gateway.metrics import cluster, handler
from sluice_gateway.metrics.exposition import CONTENT_TYPE, MetricFamily, render, select
from sluice_gateway.metrics.inference import InferenceMetrics

log = get_logger(__name__)


class MetricsRoutes:
    def __init__(self, inference: InferenceMetrics, reader: ClusterReader) -> None:
        self._inference = inference
        self._reader = reader

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.metrics)]

    async def metrics(self, request: web.Request) -> web.Response:
        families = self._inference.families() + await self._cluster()
        body = render(select(families, request.query.getall("name[]", [])))
        return web.Response(body=body.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})

    async def _cluster(self) -> list[MetricFamily]:
        try:
            stats = await self._reader.version_stats()
            return cluster.families(stats) + handler.families(stats)
        except BrokerUnavailable as exc:
            log.warning("cluster metrics unavailable: Redis unreachable", error=str(exc))
            return []
