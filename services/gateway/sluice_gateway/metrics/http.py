"""``GET /metrics`` on ``metrics_address``: Prometheus text format 0.0.4, ``?name[]=`` filtering, no
token (as in TorchServe). If the broker does not answer, the gateway's own counters and its host's
system metrics are still served."""

from aiohttp import web
from sluice.host_readings import read_host
from sluice.log import get_logger

from sluice_gateway.broker.seam import BrokerUnavailable, ClusterReader
from sluice_gateway.metrics import cluster, handler, system
from sluice_gateway.metrics.cluster import VersionStats
from sluice_gateway.metrics.exposition import CONTENT_TYPE, render, select
from sluice_gateway.metrics.inference import InferenceMetrics

log = get_logger(__name__)


class MetricsRoutes:
    def __init__(self, inference: InferenceMetrics, reader: ClusterReader) -> None:
        self._inference = inference
        self._reader = reader

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/metrics", self.metrics)]

    async def metrics(self, request: web.Request) -> web.Response:
        families = self._inference.families()
        stats = await self._stats()
        if stats is not None:
            families += cluster.families(stats) + handler.families(stats)
        own_host = (self._inference.hostname, read_host())
        families += system.families(system.hosts(own_host, stats or []))
        body = render(select(families, request.query.getall("name[]", [])))
        return web.Response(body=body.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})

    async def _stats(self) -> list[VersionStats] | None:
        try:
            return await self._reader.version_stats()
        except BrokerUnavailable as exc:
            log.warning("cluster metrics unavailable: Redis unreachable", error=str(exc))
            return None
