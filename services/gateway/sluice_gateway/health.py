"""Health as the gateway reports it: TorchServe's Ping text and model health."""

import json

from sluice.log import get_logger

from sluice_gateway.broker.seam import BrokerUnavailable, ClusterReader

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
    its min_workers. A broker that cannot be reached counts as unhealthy."""

    def __init__(self, reader: ClusterReader) -> None:
        self._reader = reader

    async def healthy(self) -> bool:
        try:
            return await self._all_default_versions_healthy()
        except BrokerUnavailable as exc:
            log.warning("model health unknown: Redis unreachable", error=str(exc))
            return False

    async def _all_default_versions_healthy(self) -> bool:
        for model in await self._reader.model_names():
            default, _versions = await self._reader.model_versions(model)
            if default is None:
                continue
            record = await self._reader.version_record(model, default)
            if record is None:
                continue
            live = await self._reader.live_workers(model, default)
            if not version_healthy(record.min_workers, len(live)):
                return False
        return True
