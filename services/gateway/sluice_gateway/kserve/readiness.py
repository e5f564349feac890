"""KServe v2 readiness: the server is ready once the manager finished its startup and every startup model
has its minimum of live workers; a model version is ready while it has a live worker (and at least its
``min_workers``). Policies are pure; :class:`RegistryReadiness` reads through the broker's
:class:`~sluice_gateway.broker.seam.ClusterReader`."""

from collections.abc import Mapping

from sluice.log import get_logger
from sluice.registry.records import StartupReport

from sluice_gateway.broker.seam import BrokerUnavailable, ClusterReader

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
    def __init__(self, reader: ClusterReader) -> None:
        self._reader = reader

    async def startup_models_ready(self) -> bool:
        try:
            report = await self._reader.startup_report()
            live: dict[tuple[str, str], int] = {}
            for model in report.models if report is not None else []:
                workers = await self._reader.live_workers(model.model_name, model.version)
                live[(model.model_name, model.version)] = len(workers)
        except (BrokerUnavailable, ValueError) as exc:
            log.warning("startup readiness unknown", error=str(exc))
            return False
        return startup_complete(report, live)

    async def live_workers(self, model: str, version: str) -> int:
        return len(await self._reader.live_workers(model, version))
