"""Adoption at a manager's start: take over the workers a previous manager started, clean up after
those that died meanwhile, and adopt workers that run without a launch record, so that a restart
neither duplicates nor orphans workers."""

from sluice.log import get_logger
from sluice.registry.records import WorkerRecord

from sluice_manager.supervision.launchers.base import Launcher, LaunchRecord, Placement
from sluice_manager.supervision.state_store import SupervisionStore

log = get_logger(__name__)


async def adopt(store: SupervisionStore, launcher: Launcher) -> None:
    """Take over the workers a previous manager started, and clean up after those that died
    meanwhile, so that a restart neither duplicates nor orphans workers."""
    launched = await store.launched()
    mine = [record for record in launched.values() if record.launcher == launcher.name]
    adopted = {record.worker_id for record in await launcher.adopt(mine)}
    for record in mine:
        if record.worker_id not in adopted:
            log.info("worker gone while no manager ran", model=record.model_name, version=record.version,
                     worker=record.worker_id)  # fmt: skip
            await store.forget_worker(record.model_name, record.version, record.worker_id)
    if launcher.can_start:
        await _adopt_unrecorded(store, launcher, set(launched))


async def _adopt_unrecorded(store: SupervisionStore, launcher: Launcher, known: set[str]) -> None:
    """Workers that run without a launch record (a manager died between starting one and
    recording it): those the launcher sees itself (containers by their labels), and local ones
    that announced themselves. Adopted, they are reconciled like any other (a worker of a
    version no longer registered is then stopped)."""
    candidates = [record for record in await launcher.discover() if record.worker_id not in known]
    seen = known | {record.worker_id for record in candidates}
    host = (await launcher.capacity()).host
    for model, version in await store.registered_versions():
        for worker_id, announced in (await store.announced(model, version)).items():
            if worker_id not in seen and announced.record.host == host:
                candidates.append(_announced_record(launcher.name, model, version, announced.record))
    for record in await launcher.adopt(candidates):
        await store.put_launched(record)


def _announced_record(launcher: str, model: str, version: str, worker: WorkerRecord) -> LaunchRecord:
    """A launch record for a local worker known only from its announcement (its pid and host)."""
    return LaunchRecord(
        worker_id=worker.worker_id,
        model_name=model,
        version=version,
        launcher=launcher,
        handle=str(worker.pid),
        placement=Placement(host=worker.host),
        started_unix_ms=worker.started_unix_ms,
    )
