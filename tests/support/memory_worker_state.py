"""In-memory supervision state for the unit tier, on a (simulated) clock: a
:class:`~sluice_manager.supervision.state_store.SupervisionStore` that keeps what
:class:`~sluice_manager.supervision.worker_state.WorkerStateStore` keeps in Redis, as far as the
reconcile loop, the scaler and adoption use it, and the reconcile lease (:class:`MemoryLease`).

Besides the Protocol, it offers the other writers' side, for a test to play them: the registry
(:meth:`MemoryWorkerState.register`), the workers (announce, beat, withdraw; a peer's claim scan,
:meth:`MemoryWorkerState.reap_lapsed`) and the job streams (enqueue, take, clear_jobs).
Heartbeats expire as Redis keys with a TTL do: alive while the clock is short of their expiry.
"""

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sluice.redis import keys
from sluice.registry.records import VersionRecord, WorkerRecord
from sluice_manager.supervision.autoscale import ScalingState, Signal
from sluice_manager.supervision.launchers.base import LaunchRecord
from sluice_manager.supervision.state_store import (
    AnnouncedWorker,
    RegisteredVersion,
    RestartStreak,
    VersionKey,
)

HeartbeatKey = tuple[str, str, str]


@dataclass
class VersionLoad:
    """A version's jobs as its stream shows them (a stateful version: its live sequences)."""

    queued: int = 0
    in_flight: int = 0
    # When the oldest job was enqueued, on the store's clock (None: no job).
    oldest_enqueued_s: float | None = None
    # Workers holding unacknowledged jobs (a stateful version: holding sequences).
    holders: set[str] = field(default_factory=set)


class MemoryWorkerState:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.versions: dict[VersionKey, RegisteredVersion] = {}
        self.launch_records: dict[str, LaunchRecord] = {}
        self.workers: dict[VersionKey, dict[str, WorkerRecord]] = {}
        # Heartbeat key -> when it expires, on the clock.
        self.heartbeats: dict[HeartbeatKey, float] = {}
        self.loads: dict[VersionKey, VersionLoad] = {}
        self.streaks: dict[VersionKey, RestartStreak] = {}
        self.scaling: dict[VersionKey, ScalingState] = {}
        # The reconcile lease: (holder, expiry on the clock).
        self.lease: tuple[str, float] | None = None
        self._worker_ids = itertools.count(keys.FIRST_WORKER_ID)

    # --- the registry's side ---------------------------------------------------------------------

    def register(self, record: VersionRecord, *, active: bool = True) -> None:
        """Add or update a version (an update of its worker range is what ScaleWorker writes)."""
        self.versions[(record.model_name, record.version)] = RegisteredVersion(record, active)

    def mark_removing(self, model: str, version: str) -> None:
        self.register(self.versions[(model, version)].record, active=False)

    # --- the workers' side -----------------------------------------------------------------------

    def announce(self, model: str, version: str, record: WorkerRecord, *, ttl_s: float) -> None:
        """A worker writes its record and beats."""
        self.workers.setdefault((model, version), {})[record.worker_id] = record
        self.beat(model, version, record.worker_id, ttl_s=ttl_s)

    def beat(self, model: str, version: str, worker_id: str, *, ttl_s: float) -> None:
        self.heartbeats[(model, version, worker_id)] = self.clock() + ttl_s

    def withdraw(self, model: str, version: str, worker_id: str) -> None:
        """A worker leaving on its own (drained): its record and heartbeat go."""
        self.workers.get((model, version), {}).pop(worker_id, None)
        self.heartbeats.pop((model, version, worker_id), None)

    def reap_lapsed(self, model: str, version: str) -> set[str]:
        """What a peer's claim scan does: delete the record of each worker whose heartbeat lapsed."""
        records = self.workers.get((model, version), {})
        lapsed = {worker_id for worker_id in records if not self._alive((model, version, worker_id))}
        for worker_id in lapsed:
            del records[worker_id]
        return lapsed

    def heartbeat_alive(self, model: str, version: str, worker_id: str) -> bool:
        return self._alive((model, version, worker_id))

    # --- the job streams' side -------------------------------------------------------------------

    def enqueue(self, model: str, version: str, count: int = 1) -> None:
        """``count`` jobs join the version's stream (a gateway's enqueue)."""
        load = self.loads.setdefault((model, version), VersionLoad())
        load.queued += count
        if load.oldest_enqueued_s is None:
            load.oldest_enqueued_s = self.clock()

    def take(self, model: str, version: str, worker_id: str, count: int = 1) -> None:
        """A worker reads ``count`` queued jobs and holds them until it acknowledges them."""
        load = self.loads[(model, version)]
        assert load.queued >= count, "no such jobs queued"
        load.queued -= count
        load.in_flight += count
        load.holders.add(worker_id)

    def clear_jobs(self, model: str, version: str) -> None:
        """Every job answered and acknowledged (acknowledged jobs leave the stream)."""
        self.loads.pop((model, version), None)

    # --- SupervisionStore ------------------------------------------------------------------------

    async def registered_versions(self) -> dict[VersionKey, RegisteredVersion]:
        return dict(sorted(self.versions.items()))

    async def launched(self) -> dict[str, LaunchRecord]:
        return dict(self.launch_records)

    async def launched_one(self, worker_id: str) -> LaunchRecord | None:
        return self.launch_records.get(worker_id)

    async def put_launched(self, record: LaunchRecord) -> None:
        self.launch_records[record.worker_id] = record

    async def forget_worker(self, model: str, version: str, worker_id: str) -> None:
        self.launch_records.pop(worker_id, None)
        self.withdraw(model, version, worker_id)

    async def announced(self, model: str, version: str) -> dict[str, AnnouncedWorker]:
        return {
            worker_id: AnnouncedWorker(record, self._alive((model, version, worker_id)))
            for worker_id, record in self.workers.get((model, version), {}).items()
        }

    async def busy_workers(self, model: str, version: str, *, stateful: bool = False) -> set[str]:
        return set(self.loads.get((model, version), VersionLoad()).holders)

    async def restart_streak(self, model: str, version: str) -> RestartStreak:
        return self.streaks.get((model, version), RestartStreak())

    async def record_failure(self, model: str, version: str, log_path: str = "") -> RestartStreak:
        streak = await self.restart_streak(model, version)
        now_ms = int(self.clock() * 1000)
        updated = RestartStreak(
            failures=streak.failures + 1,
            first_failure_unix_ms=streak.first_failure_unix_ms or now_ms,
            last_failure_unix_ms=now_ms,
            last_failure_log=log_path,
        )
        self.streaks[(model, version)] = updated
        return updated

    async def clear_streak(self, model: str, version: str) -> None:
        self.streaks.pop((model, version), None)

    async def next_worker_id(self) -> str:
        return str(next(self._worker_ids))

    async def scaling_state(self, model: str, version: str) -> ScalingState | None:
        return self.scaling.get((model, version))

    async def put_scaling_state(self, model: str, version: str, state: ScalingState) -> None:
        self.scaling[(model, version)] = state

    async def signal(
        self,
        model: str,
        version: str,
        at_s: float,
        workers: Mapping[str, AnnouncedWorker],
        *,
        stateful: bool = False,
    ) -> Signal:
        busy = sum(worker.record.load_share for worker in workers.values() if worker.heartbeat)
        load = self.loads.get((model, version), VersionLoad())
        age_s = 0.0 if load.oldest_enqueued_s is None else max(0.0, at_s - load.oldest_enqueued_s)
        return Signal(
            at_s=at_s,
            queued=load.queued,
            in_flight=load.in_flight,
            oldest_age_s=0.0 if stateful else age_s,
            busy=busy,
            stateful=stateful,
        )

    def _alive(self, key: HeartbeatKey) -> bool:
        expiry = self.heartbeats.get(key)
        return expiry is not None and self.clock() < expiry


class MemoryLease:
    """The reconcile lease (:class:`sluice_manager.supervision.lease.ManagerLease`) on a shared
    :class:`MemoryWorkerState`: held until released or ``ttl_s`` after the holder's last renewal.
    (The real lease also takes over at once from a dead holder on its own host; not modelled.)"""

    def __init__(self, store: MemoryWorkerState, identity: str, *, ttl_s: float) -> None:
        self.store = store
        self.identity = identity
        self.ttl_s = ttl_s

    async def hold(self) -> bool:
        """Acquire or renew; True while this holder has it."""
        now = self.store.clock()
        current = self.store.lease
        if current is not None and current[0] != self.identity and now < current[1]:
            return False
        self.store.lease = (self.identity, now + self.ttl_s)
        return True

    async def release(self) -> None:
        if self.store.lease is not None and self.store.lease[0] == self.identity:
            self.store.lease = None
