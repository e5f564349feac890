"""The reconcile loop: observe each model version (Redis + launcher), ask :func:`policy.decide`, apply.

Runs every ``reconcile_interval_s`` and at once when woken (a worker exited, a model was registered or
scaled). Only the manager holding the lease reconciles.
"""

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sluice import registry
from sluice.log import get_logger
from sluice.records import WorkerRecord, WorkerStatus

from sluice_manager.launcher import Launcher, LaunchRecord, ProcessState, WorkerSpec
from sluice_manager.policy import Actions, Desired, ObservedWorker, Phase, Timing, decide, restart_delay_s
from sluice_manager.waiting import wait_any
from sluice_manager.worker_state import AnnouncedWorker, RegisteredVersion, WorkerStateStore

log = get_logger(__name__)

_PHASES = {
    WorkerStatus.STARTING: Phase.STARTING,
    WorkerStatus.READY: Phase.READY,
    WorkerStatus.UNLOADING: Phase.UNLOADING,
}


@dataclass(frozen=True)
class ReconcilerConfig:
    timing: Timing
    reconcile_interval_s: float = 1.0
    # CPU cores shared by the local workers (torch threads per worker = cores // local workers).
    cpu_count: int = 1
    number_of_gpu: int = 0


class Reconciler:
    def __init__(
        self,
        redis: "aioredis.Redis",
        launcher: Launcher,
        config: ReconcilerConfig,
        *,
        host: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = WorkerStateStore(redis)
        self.redis = redis
        self.launcher = launcher
        self.config = config
        self.host = host
        self.clock = clock
        self._wake = asyncio.Event()
        self._heartbeat_missing_since: dict[str, float] = {}
        self._gpu_turn = itertools.count()
        self._waiting_logged: set[tuple[str, str]] = set()
        # One reconcile pass or one exit report at a time: an exit seen while a worker is being
        # started must find its launch record, and a pass must not act on a half-applied exit.
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

    async def adopt(self) -> None:
        """Take over the workers a previous manager started on this host, and clean up after those that
        died meanwhile, so that a restart neither duplicates nor orphans workers."""
        launched = await self.store.launched()
        for record in launched.values():
            if self.launcher.adopt(record):
                continue
            if record.host == self.host and record.launcher == self.launcher.name:
                log.info("worker gone while no manager ran", model=record.model_name, version=record.version,
                         worker=record.worker_id)  # fmt: skip
                await self.store.forget_worker(record.model_name, record.version, record.worker_id)
        await self._adopt_unrecorded(set(launched))

    async def _adopt_unrecorded(self, known: set[str]) -> None:
        """Workers that announced themselves on this host but have no launch record: the manager died
        between spawning one and recording it."""
        if not self.launcher.can_start:
            return
        for (model, version), _ in (await self.store.registered_versions()).items():
            for worker_id, announced in (await self.store.announced(model, version)).items():
                if worker_id in known or announced.record.host != self.host:
                    continue
                record = LaunchRecord(
                    worker_id=worker_id,
                    model_name=model,
                    version=version,
                    launcher=self.launcher.name,
                    host=self.host,
                    pid=announced.record.pid,
                    started_unix_ms=announced.record.started_unix_ms,
                )
                if self.launcher.adopt(record):
                    await self.store.put_launched(record)

    async def on_worker_exit(self, worker_id: str, exit_code: int | None) -> None:
        """A worker process ended: drop its records at once (its jobs get reclaimed quickly) and count
        an unexpected exit toward the restart backoff."""
        async with self._lock:
            await self._handle_exit(worker_id, exit_code)
        self.wake()

    async def _handle_exit(self, worker_id: str, exit_code: int | None) -> None:
        record = await self.store.launched_one(worker_id)
        self.launcher.forget(worker_id)
        self._heartbeat_missing_since.pop(worker_id, None)
        if record is None:
            return
        await self.store.forget_worker(record.model_name, record.version, worker_id)
        bound = log.bind(model=record.model_name, version=record.version, worker=worker_id)
        if record.stop_requested_unix_ms:
            bound.info("worker stopped", exit_code=exit_code)
        else:
            streak = await self.store.record_failure(record.model_name, record.version)
            bound.warning("worker exited unexpectedly", exit_code=exit_code, failures=streak.failures,
                          log_file=record.log_path)  # fmt: skip

    async def reconcile_once(self) -> None:
        async with self._lock:
            await self._reconcile_all()

    async def _reconcile_all(self) -> None:
        versions = await self.store.registered_versions()
        launched = await self.store.launched()
        by_version: dict[tuple[str, str], list[LaunchRecord]] = {}
        for record in launched.values():
            by_version.setdefault((record.model_name, record.version), []).append(record)
        local_workers = sum(v.record.min_workers for v in versions.values() if v.active)
        for key in sorted(set(versions) | set(by_version)):
            await self._reconcile_version(key, versions.get(key), by_version.get(key, []), local_workers)

    async def _reconcile_version(
        self,
        key: tuple[str, str],
        registered: RegisteredVersion | None,
        launched: list[LaunchRecord],
        local_workers: int,
    ) -> None:
        model, version = key
        announced = await self.store.announced(model, version)
        launched = await self._note_ready(launched, announced)
        busy = await self.store.busy_workers(model, version)
        observed = self._observe(launched, announced, busy)
        streak = await self.store.restart_streak(model, version)
        if registered is None:
            desired = Desired(0, 0, startup_timeout_s=0, active=False)
            wait_s = 0.0
        else:
            record = registered.record
            desired = Desired(
                record.min_workers, record.max_workers, record.startup_timeout_s, registered.active
            )
            delay_s = restart_delay_s(streak.failures, record.max_retry_timeout_s)
            wait_s = streak.last_failure_unix_ms / 1000 + delay_s - self.clock() if streak.failures else 0.0
        actions = decide(desired, observed, self.config.timing, wait_s)
        await self._apply(model, version, actions, observed, local_workers)
        if streak.failures and any(w.owned and w.phase is Phase.READY and w.heartbeat for w in observed):
            await self.store.clear_streak(model, version)

    async def _note_ready(
        self, launched: list[LaunchRecord], announced: dict[str, AnnouncedWorker]
    ) -> list[LaunchRecord]:
        """Stamp the launch record of each worker seen READY for the first time, so that it is still
        known to have been READY once a peer has deleted its record (see ``ObservedWorker.was_ready``)."""
        noted: list[LaunchRecord] = []
        for record in launched:
            seen = announced.get(record.worker_id)
            if not record.ready_unix_ms and seen is not None and seen.record.status is WorkerStatus.READY:
                record = record.model_copy(update={"ready_unix_ms": int(self.clock() * 1000)})
                await self.store.put_launched(record)
            noted.append(record)
        return noted

    def _observe(
        self, launched: list[LaunchRecord], announced: dict[str, AnnouncedWorker], busy: set[str]
    ) -> list[ObservedWorker]:
        states = self.launcher.list()
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
                    process=states.get(worker_id, ProcessState.UNKNOWN),
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
        self, model: str, version: str, actions: Actions, observed: list[ObservedWorker], local_workers: int
    ) -> None:
        bound = log.bind(model=model, version=version)
        owned = {w.worker_id for w in observed if w.owned}
        for worker_id in actions.forget:
            if worker_id in owned:
                # Our process exited and this pass saw it before the launcher's exit callback ran:
                # handle it as the callback would, so that a crash counts toward the restart backoff
                # whichever comes first (the callback then finds nothing left to do).
                await self._handle_exit(worker_id, None)
                continue
            bound.info("worker gone; records removed", worker=worker_id)
            await self.store.forget_worker(model, version, worker_id)
            self.launcher.forget(worker_id)
            self._heartbeat_missing_since.pop(worker_id, None)
        for worker_id in actions.kill:
            if worker_id in owned:
                bound.warning("killing unresponsive worker", worker=worker_id)
                await self.launcher.stop(worker_id, graceful=False)
        for worker_id in actions.stop:
            await self._request_stop(worker_id)
        if actions.start:
            await self._start(model, version, actions.start, local_workers)

    async def _request_stop(self, worker_id: str) -> None:
        record = await self.store.launched_one(worker_id)
        if record is not None and not record.stop_requested_unix_ms:
            stamped = record.model_copy(update={"stop_requested_unix_ms": int(self.clock() * 1000)})
            await self.store.put_launched(stamped)
            log.info("stopping worker", model=record.model_name, version=record.version, worker=worker_id)
        await self.launcher.stop(worker_id, graceful=True)

    async def _start(self, model: str, version: str, count: int, local_workers: int) -> None:
        if not self.launcher.can_start:
            if (model, version) not in self._waiting_logged:
                self._waiting_logged.add((model, version))
                log.info(
                    "waiting for externally started workers", model=model, version=version, missing=count
                )
            return
        record = await registry.get_version(self.redis, model, version)
        threads = max(1, self.config.cpu_count // max(1, local_workers))
        for _ in range(count):
            worker_id = await registry.next_worker_id(self.redis)
            gpu_id = None
            if record is not None and record.device_type == "gpu" and self.config.number_of_gpu > 0:
                gpu_id = next(self._gpu_turn) % self.config.number_of_gpu
            spec = WorkerSpec(model, version, worker_id, torch_threads=threads, gpu_id=gpu_id)
            try:
                launched = await self.launcher.start(spec)
            except OSError as exc:
                log.error("could not start worker", model=model, version=version, error=str(exc))
                await self.store.record_failure(model, version)
                return
            await self.store.put_launched(launched)

    async def shutdown(self, timeout_s: float) -> None:
        """Stop every worker this manager runs: SIGTERM (they drain), wait up to ``timeout_s``, then
        SIGKILL the stragglers."""
        running = [wid for wid, state in self.launcher.list().items() if state is ProcessState.RUNNING]
        async with self._lock:
            for worker_id in running:
                try:
                    await self._request_stop(worker_id)
                except RedisError:
                    await self.launcher.stop(worker_id, graceful=True)
        if not await self._all_exited(running, timeout_s):
            for worker_id in running:
                if self.launcher.list().get(worker_id) is ProcessState.RUNNING:
                    log.warning("worker did not stop in time; killing it", worker=worker_id)
                    await self.launcher.stop(worker_id, graceful=False)
            await self._all_exited(running, 5.0)

    async def _all_exited(self, worker_ids: list[str], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = self.launcher.list()
            if all(states.get(wid) is not ProcessState.RUNNING for wid in worker_ids):
                return True
            await asyncio.sleep(0.05)
        return False


def _started_unix_ms(launch: LaunchRecord | None, worker: WorkerRecord | None) -> int:
    if launch is not None:
        return launch.started_unix_ms
    return worker.started_unix_ms if worker is not None else 0
