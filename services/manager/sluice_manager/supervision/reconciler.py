"""The reconcile loop: observe each model version (Redis + launcher), ask :func:`policy.decide`, apply.

Runs every ``reconcile_interval_s`` and at once when woken (a worker exited, a model was registered or
scaled). Only the manager holding the lease reconciles. Exits reach it as events from the launcher
(:meth:`Reconciler.follow_exits`); a pass that sees an exit first handles it the same way. Each pass
asks the autoscaler (:mod:`.scaler`) how many workers a version wants; at start, :mod:`.adoption`
takes over what a previous manager left running.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisError
from sluice.log import get_logger
from sluice.registry.records import VersionRecord, WorkerRecord, WorkerStatus

from sluice_manager.supervision import adoption
from sluice_manager.supervision.launchers.base import (
    LOG_PATH,
    Capacity,
    ContainerLimits,
    Launcher,
    LaunchRecord,
    RunState,
    WorkerExit,
    WorkerSpec,
)
from sluice_manager.supervision.placement import place
from sluice_manager.supervision.policy import (
    Actions,
    Desired,
    ObservedWorker,
    Phase,
    Timing,
    decide,
    restart_delay_s,
)
from sluice_manager.supervision.scaler import Scaler
from sluice_manager.supervision.state_store import (
    AnnouncedWorker,
    RegisteredVersion,
    SupervisionStore,
    VersionKey,
)
from sluice_manager.waiting import wait_any

log = get_logger(__name__)

_PHASES = {
    WorkerStatus.STARTING: Phase.STARTING,
    WorkerStatus.READY: Phase.READY,
    WorkerStatus.UNLOADING: Phase.UNLOADING,
}
# The workers a launcher that reports no cores (external) may hold: no bound.
UNBOUNDED = 1_000_000
# Default worker slots per core: a worker's torch threads share the cores, and handlers that wait
# (I/O, a GPU) leave them idle part of the time.
WORKERS_PER_CORE = 2


@dataclass(frozen=True)
class ReconcilerConfig:
    timing: Timing
    reconcile_interval_s: float = 1.0
    # Limits of a worker container when its model-config.yaml sets none (0: no limit).
    default_limits: ContainerLimits = field(default_factory=ContainerLimits)
    # Workers the launcher's host may run in all, the autoscaler's ceiling beside maxWorkers
    # (0: WORKERS_PER_CORE per core it reports; a launcher that reports none has no ceiling).
    worker_slots: int = 0


class Reconciler:
    def __init__(
        self,
        store: SupervisionStore,
        launcher: Launcher,
        config: ReconcilerConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.config = config
        self.clock = clock
        self.scaler = Scaler(store, clock)
        self._wake = asyncio.Event()
        self._heartbeat_missing_since: dict[str, float] = {}
        self._waiting_logged: set[VersionKey] = set()
        # One reconcile pass or one exit at a time: an exit seen while a worker is being started
        # must find its launch record, and a pass must not act on a half-applied exit.
        self._lock = asyncio.Lock()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event, may_reconcile: Callable[[], Awaitable[bool]]) -> None:
        """Reconcile until ``stop`` is set; ``may_reconcile`` renews (or acquires) the lease."""
        while not stop.is_set():
            self._wake.clear()
            try:
                if await may_reconcile():
                    await self.reconcile_once()
            except RedisError as exc:
                log.warning("redis unavailable; reconcile skipped", error=str(exc))
            except Exception:
                log.exception("reconcile failed")
            await wait_any(stop, self._wake, timeout_s=self.config.reconcile_interval_s)

    async def follow_exits(self) -> None:
        """Handle each exit the launcher reports, until cancelled."""
        async for ended in self.launcher.exits():
            try:
                await self.on_worker_exit(ended)
            except RedisError as exc:
                # The next pass sees the worker exited and handles it then.
                log.warning("redis unavailable; worker exit left to the next pass", error=str(exc))
            except Exception:
                log.exception("worker exit handling failed", worker=ended.worker_id)

    async def adopt(self) -> None:
        """Take over the workers a previous manager started (:func:`adoption.adopt`)."""
        await adoption.adopt(self.store, self.launcher)

    async def on_worker_exit(self, ended: WorkerExit) -> None:
        """A worker ended: drop its records at once (its jobs get reclaimed quickly) and count an
        unexpected exit toward the restart backoff."""
        async with self._lock:
            await self._handle_exit(ended)
        self.wake()

    async def _handle_exit(self, ended: WorkerExit) -> None:
        worker_id = ended.worker_id
        record = await self.store.launched_one(worker_id)
        await self.launcher.release(worker_id)
        self._heartbeat_missing_since.pop(worker_id, None)
        if record is None:
            return
        await self.store.forget_worker(record.model_name, record.version, worker_id)
        bound = log.bind(model=record.model_name, version=record.version, worker=worker_id)
        if record.stop_requested_unix_ms:
            bound.info("worker stopped", exit_code=ended.exit_code)
        else:
            streak = await self.store.record_failure(
                record.model_name, record.version, record.details.get(LOG_PATH, "")
            )
            bound.warning("worker exited unexpectedly", exit_code=ended.exit_code, reason=ended.reason,
                          failures=streak.failures, **record.details)  # fmt: skip

    async def reconcile_once(self) -> None:
        async with self._lock:
            await self._reconcile_all()

    async def _reconcile_all(self) -> None:
        versions = await self.store.registered_versions()
        launched = await self.store.launched()
        states = await self.launcher.states()
        capacity = await self.launcher.capacity()
        by_version: dict[VersionKey, list[LaunchRecord]] = {}
        for record in launched.values():
            by_version.setdefault((record.model_name, record.version), []).append(record)
        # Read once a pass: the autoscaler sums their busy shares, the policy looks at their states.
        announced = {key: await self.store.announced(*key) for key in sorted(set(versions) | set(by_version))}
        wanted = {
            key: await self.scaler.wanted(
                version.record,
                announced[key],
                self._slots(capacity) - (len(launched) - len(by_version.get(key, []))),
            )
            for key, version in versions.items()
            if version.active
        }
        planned = sum(wanted.values())
        # One list for the whole pass: a worker started for one version holds its GPU when the next
        # version's workers are placed.
        everywhere = list(launched.values())
        for key, workers in announced.items():
            registered = versions.get(key)
            desired = self._desired(registered, wanted.get(key, 0))
            await self._reconcile_version(
                key,
                registered,
                desired,
                by_version.get(key, []),
                workers,
                states,
                planned,
                everywhere,
            )

    def _slots(self, capacity: Capacity) -> int:
        if self.config.worker_slots:
            return self.config.worker_slots
        return capacity.cpus * WORKERS_PER_CORE if capacity.cpus else UNBOUNDED

    def _desired(self, registered: RegisteredVersion | None, wanted: int) -> Desired:
        if registered is None:
            return Desired(0, startup_timeout_s=0, active=False)
        record = registered.record
        return Desired(wanted, record.startup_timeout_s, registered.active, record.stop_timeout_s)

    async def _reconcile_version(
        self,
        key: VersionKey,
        registered: RegisteredVersion | None,
        desired: Desired,
        launched: list[LaunchRecord],
        announced: dict[str, AnnouncedWorker],
        states: dict[str, RunState],
        planned: int,
        everywhere: list[LaunchRecord],
    ) -> None:
        model, version = key
        launched = await self._note_ready(launched, announced)
        busy = await self.store.busy_workers(
            model, version, stateful=registered is not None and registered.record.stateful
        )
        observed = self._observe(launched, announced, busy, states)
        streak = await self.store.restart_streak(model, version)
        wait_s = 0.0
        if registered is not None and streak.failures:
            delay_s = restart_delay_s(streak.failures, registered.record.max_retry_timeout_s)
            wait_s = streak.last_failure_unix_ms / 1000 + delay_s - self.clock()
        actions = decide(desired, observed, self.config.timing, wait_s)
        version_record = registered.record if registered else None
        await self._apply(key, actions, observed, version_record, planned, everywhere)
        if streak.failures and any(w.owned and w.phase is Phase.READY and w.heartbeat for w in observed):
            await self.store.clear_streak(model, version)

    async def _note_ready(
        self, launched: list[LaunchRecord], announced: dict[str, AnnouncedWorker]
    ) -> list[LaunchRecord]:
        """Stamp the launch record of each worker seen READY for the first time: once its heartbeat
        lapses a peer deletes its own record, and the stamp still tells a hung worker from one that
        is loading."""
        noted: list[LaunchRecord] = []
        for record in launched:
            seen = announced.get(record.worker_id)
            if not record.ready_unix_ms and seen is not None and seen.record.status is WorkerStatus.READY:
                record = record.model_copy(update={"ready_unix_ms": int(self.clock() * 1000)})
                await self.store.put_launched(record)
            noted.append(record)
        return noted

    def _observe(
        self,
        launched: list[LaunchRecord],
        announced: dict[str, AnnouncedWorker],
        busy: set[str],
        states: dict[str, RunState],
    ) -> list[ObservedWorker]:
        by_id = {record.worker_id: record for record in launched}
        now = self.clock()
        observed: list[ObservedWorker] = []
        for worker_id in sorted(set(by_id) | set(announced)):
            launch = by_id.get(worker_id)
            seen = announced.get(worker_id)
            phase = _PHASES.get(seen.record.status, Phase.NONE) if seen else Phase.NONE
            heartbeat = seen.heartbeat if seen else False
            was_ready = phase is Phase.READY or (launch is not None and launch.ready_unix_ms > 0)
            observed.append(
                ObservedWorker(
                    worker_id=worker_id,
                    owned=worker_id in states,
                    state=states.get(worker_id),
                    phase=phase,
                    heartbeat=heartbeat,
                    was_ready=was_ready,
                    heartbeat_missing_s=self._missing_for(
                        worker_id, not heartbeat and (seen is not None or was_ready), now
                    ),
                    age_s=now - _started_unix_ms(launch, seen.record if seen else None) / 1000,
                    stopping_s=now - launch.stop_requested_unix_ms / 1000
                    if launch and launch.stop_requested_unix_ms
                    else None,
                    busy=worker_id in busy,
                )
            )
        return observed

    def _missing_for(self, worker_id: str, missing: bool, now: float) -> float:
        if not missing:
            self._heartbeat_missing_since.pop(worker_id, None)
            return 0.0
        return now - self._heartbeat_missing_since.setdefault(worker_id, now)

    async def _apply(
        self,
        key: VersionKey,
        actions: Actions,
        observed: list[ObservedWorker],
        record: VersionRecord | None,
        planned: int,
        everywhere: list[LaunchRecord],
    ) -> None:
        model, version = key
        bound = log.bind(model=model, version=version)
        owned = {w.worker_id for w in observed if w.owned}
        for worker_id in actions.forget:
            if worker_id in owned:
                # The worker exited and this pass saw it before the exit event was handled: handle it
                # as the event would, so that a crash counts toward the restart backoff whichever
                # comes first (the event then finds nothing left to do).
                await self._handle_exit(WorkerExit(worker_id, None))
                continue
            bound.info("worker gone; records removed", worker=worker_id)
            await self.store.forget_worker(model, version, worker_id)
            self._heartbeat_missing_since.pop(worker_id, None)
        for worker_id in actions.kill:
            if worker_id in owned:
                bound.warning("killing unresponsive worker", worker=worker_id)
                await self.launcher.stop(worker_id, graceful=False)
        for worker_id in actions.stop:
            # A version whose stop timeout is 0 (ScaleWorker's `timeout=0`) has its workers stopped at once.
            await self._request_stop(worker_id, graceful=record is None or record.stop_timeout_s != 0)
        if actions.start and record is not None:
            await self._start(record, actions.start, planned, everywhere)

    async def _request_stop(self, worker_id: str, *, graceful: bool = True) -> None:
        record = await self.store.launched_one(worker_id)
        if record is not None and not record.stop_requested_unix_ms:
            stamped = record.model_copy(update={"stop_requested_unix_ms": int(self.clock() * 1000)})
            await self.store.put_launched(stamped)
            log.info("stopping worker", model=record.model_name, version=record.version, worker=worker_id,
                     graceful=graceful)  # fmt: skip
        await self.launcher.stop(worker_id, graceful=graceful)

    async def _start(
        self, record: VersionRecord, count: int, planned: int, everywhere: list[LaunchRecord]
    ) -> None:
        model, version = record.model_name, record.version
        if not self.launcher.can_start:
            if (model, version) not in self._waiting_logged:
                self._waiting_logged.add((model, version))
                log.info(
                    "waiting for externally started workers", model=model, version=version, missing=count
                )
            return
        capacity = await self.launcher.capacity()
        placements = place(
            capacity,
            [launched.placement for launched in everywhere],
            count,
            device_type=record.device_type,
            planned_workers=planned,
        )
        limits = ContainerLimits(
            cpus=record.container_cpus or self.config.default_limits.cpus,
            memory_bytes=record.container_memory_bytes or self.config.default_limits.memory_bytes,
        )
        for placement in placements:
            worker_id = await self.store.next_worker_id()
            spec = WorkerSpec(model, version, worker_id, placement, limits)
            try:
                launched = await self.launcher.start(spec)
            except OSError as exc:
                log.error("could not start worker", model=model, version=version, error=str(exc))
                await self.store.record_failure(model, version)
                return
            await self.store.put_launched(launched)
            everywhere.append(launched)

    async def shutdown(self, timeout_s: float) -> None:
        """Stop every worker this manager runs, unless they outlive it (containers, which the next
        manager adopts): SIGTERM (they drain), wait up to ``timeout_s``, then SIGKILL the stragglers."""
        if self.launcher.workers_outlive_manager:
            return
        states = await self.launcher.states()
        running = [worker_id for worker_id, state in states.items() if state is RunState.RUNNING]
        async with self._lock:
            for worker_id in running:
                try:
                    await self._request_stop(worker_id)
                except RedisError:
                    await self.launcher.stop(worker_id, graceful=True)
        if not await self._all_exited(running, timeout_s):
            states = await self.launcher.states()
            for worker_id in running:
                if states.get(worker_id) is RunState.RUNNING:
                    log.warning("worker did not stop in time; killing it", worker=worker_id)
                    await self.launcher.stop(worker_id, graceful=False)
            await self._all_exited(running, 5.0)
        # Their exit events may still wait in the launcher's queue (the follower is about to stop):
        # clean up after each one here too (handling an exit twice does nothing more).
        states = await self.launcher.states()
        for worker_id in running:
            if states.get(worker_id) is RunState.EXITED:
                try:
                    await self.on_worker_exit(WorkerExit(worker_id, None))
                except RedisError:
                    log.warning("redis unavailable; the records of a stopped worker stay", worker=worker_id)

    async def _all_exited(self, worker_ids: list[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = await self.launcher.states()
            if all(states.get(wid) is not RunState.RUNNING for wid in worker_ids):
                return True
            await asyncio.sleep(0.05)
        return False


def _started_unix_ms(launch: LaunchRecord | None, worker: WorkerRecord | None) -> int:
    if launch is not None:
        return launch.started_unix_ms
    return worker.started_unix_ms if worker is not None else 0
