"""The autoscaler's step of a reconcile pass: read a version's scaling state and load from Redis, ask
the pure policy (:func:`sluice_manager.supervision.autoscale.decide`) for the count it should run,
log each change, and keep the state for a restarted manager and the metrics."""

from collections.abc import Callable, Mapping

from sluice.log import get_logger
from sluice.registry.records import VersionRecord

from sluice_manager.supervision import autoscale
from sluice_manager.supervision.autoscale import Signal, scaling_settings
from sluice_manager.supervision.state_store import AnnouncedWorker, ScalingStore

log = get_logger(__name__)


class Scaler:
    def __init__(self, store: ScalingStore, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    async def wanted(self, record: VersionRecord, workers: Mapping[str, AnnouncedWorker], room: int) -> int:
        """How many workers the version should run now, ``room`` being what its host can still hold:
        the policy's choice from its load (read only when its range lets it scale)."""
        model, version = record.model_name, record.version
        settings = scaling_settings(record)
        stored = await self.store.scaling_state(model, version)
        state = stored or autoscale.initial_state(settings)
        now = self.clock()
        signal = (
            await self.store.signal(model, version, now, workers, stateful=record.stateful)
            if settings.autoscaled
            else Signal(now, 0, 0)
        )
        decision = autoscale.decide(settings, state, signal, max(room, 1))
        if decision.change is not None:
            _log_change(record, decision.change, signal, settings)
        if stored is None or decision.state != state:
            await self.store.put_scaling_state(model, version, decision.state)
        return decision.state.desired


def _log_change(
    record: VersionRecord, change: autoscale.Change, signal: Signal, settings: autoscale.ScalingSettings
) -> None:
    """One event per autoscaling decision: from -> to, the signal and the threshold."""
    log.info(
        "workers scaled",
        model=record.model_name,
        version=record.version,
        from_workers=change.from_workers,
        to_workers=change.to_workers,
        reason=change.reason,
        needed=change.needed,
        jobs=signal.jobs,
        queued=signal.queued,
        in_flight=signal.in_flight,
        busy=round(signal.busy, 3),
        oldest_job_age_s=round(signal.oldest_age_s, 3),
        target_utilization=settings.target_utilization,
        target_jobs_per_worker=settings.target_jobs_per_worker,
        range=f"{settings.min_workers}-{settings.max_workers}",
    )
