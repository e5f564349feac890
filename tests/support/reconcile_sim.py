"""A simulated cluster for the reconcile loop's unit tests, on a simulated clock: one
:class:`FakeHost`, one :class:`MemoryWorkerState` (the Redis the managers share), workers that load,
announce READY and beat as real ones do (or fail to load, or hang) and managers (a fake launcher, the
real :class:`Reconciler` and its exit follower, a lease) that can die and be replaced.

Time moves only in :meth:`Sim.tick`: the clock advances, the workers act, the exit follower handles
what the launcher reported, then the manager runs one pass of its real loop (:meth:`Reconciler.run`,
gated by its lease). Nothing sleeps: every await resolves within asyncio's scheduling.
"""

import asyncio
import itertools
import math
from dataclasses import dataclass, field

from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice_manager.supervision.policy import Timing
from sluice_manager.supervision.reconciler import Reconciler, ReconcilerConfig
from sluice_manager.supervision.state_store import VersionKey

from tests.support.fake_launcher import FakeHost, FakeLauncher
from tests.support.memory_worker_state import MemoryLease, MemoryWorkerState
from tests.support.sim_clock import SimClock

# The services' defaults: a worker's heartbeat TTL, the manager's grace, stop timeout and lease TTL.
HEARTBEAT_TTL_S = 3.0
TIMING = Timing(heartbeat_grace_s=2.0, stop_timeout_s=30.0)
LEASE_TTL_S = 10.0
NEVER = math.inf


@dataclass(frozen=True)
class Behaviour:
    """What a version's workers do once started."""

    # Until READY (NEVER: it never gets there).
    load_s: float = 0.0
    # Instead of getting READY, exit with this code (a failed load).
    exit_code: int | None = None


@dataclass
class SimWorkers:
    """The worker processes: each running one that has loaded announces itself READY and beats, as
    :mod:`sluice_worker.broker.presence` does (every beat rewrites its record)."""

    host: FakeHost
    store: MemoryWorkerState
    behaviours: dict[VersionKey, Behaviour] = field(default_factory=dict)
    # Running, but neither beating nor serving (SIGSTOP, a deadlock).
    hung: set[str] = field(default_factory=set)
    busy_share: dict[str, float] = field(default_factory=dict)
    # Peers' claim scans delete the record of a worker whose heartbeat lapsed (real workers do).
    peers_reap_lapsed: bool = False

    def act(self) -> None:
        now = self.host.clock()
        if self.peers_reap_lapsed:
            for model, version in list(self.store.workers):
                self.store.reap_lapsed(model, version)
        for worker_id, worker in list(self.host.workers.items()):
            if not worker.running or worker_id in self.hung:
                continue
            spec = worker.spec
            behaviour = self.behaviours.get((spec.model_name, spec.version), Behaviour())
            if now - worker.started_s < behaviour.load_s:
                continue
            if behaviour.exit_code is not None:
                self.host.exit(worker_id, behaviour.exit_code)
                continue
            record = WorkerRecord(
                worker_id=worker_id,
                pid=int(worker.handle),
                host=self.host.name,
                status=WorkerStatus.READY,
                started_unix_ms=int(worker.started_s * 1000),
                gpu=spec.placement.gpu_id is not None,
                gpu_id=spec.placement.gpu_id,
                busy_share=self.busy_share.get(worker_id, 0.0),
            )
            self.store.announce(spec.model_name, spec.version, record, ttl_s=HEARTBEAT_TTL_S)


@dataclass
class Manager:
    name: str
    launcher: FakeLauncher
    reconciler: Reconciler
    lease: MemoryLease
    follower: "asyncio.Task[None]"
    alive: bool = True


class Sim:
    def __init__(self, *, cpus: int = 4, gpu_ids: tuple[int, ...] = ()) -> None:
        self.clock = SimClock()
        self.host = FakeHost(cpus=cpus, gpu_ids=gpu_ids, clock=self.clock)
        self.store = MemoryWorkerState(self.clock)
        self.workers = SimWorkers(self.host, self.store)
        self.managers: list[Manager] = []
        self._names = itertools.count(1)
        self.manager = self.start_manager()

    def start_manager(self) -> Manager:
        """A manager process starts (it becomes :attr:`manager`, the one :meth:`tick` runs)."""
        launcher = FakeLauncher(self.host)
        reconciler = Reconciler(self.store, launcher, ReconcilerConfig(timing=TIMING), clock=self.clock)
        name = f"manager-{next(self._names)}"
        lease = MemoryLease(self.store, name, ttl_s=LEASE_TTL_S)
        follower = asyncio.create_task(reconciler.follow_exits(), name=f"{name}-exits")
        self.manager = Manager(name, launcher, reconciler, lease, follower)
        self.managers.append(self.manager)
        return self.manager

    async def kill_manager(self, manager: Manager) -> None:
        """The manager dies (kill -9): it stops watching, its workers run on, its lease stays."""
        manager.alive = False
        manager.follower.cancel()
        await manager.launcher.aclose()

    async def tick(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.workers.act()
        await self.settle()
        await self.one_pass()
        await self.settle()

    async def take_over(self, *, step_s: float = 1.0) -> None:
        """What a starting manager does before its loop (sluice_manager.app): wait for the lease, time
        passing and the workers acting meanwhile, then adopt what its predecessor left running."""
        while not await self.manager.lease.hold():
            self.clock.advance(step_s)
            self.workers.act()
            await self.settle()
        await self.manager.reconciler.adopt()

    async def run_for(self, seconds: float, *, step_s: float = 1.0) -> None:
        for _ in range(round(seconds / step_s)):
            await self.tick(step_s)

    async def one_pass(self) -> None:
        """One iteration of the manager's loop, as the app runs it (gated by the lease)."""
        stop = asyncio.Event()
        lease = self.manager.lease

        async def last_pass() -> bool:
            stop.set()
            return await lease.hold()

        await self.manager.reconciler.run(stop, last_pass)

    async def settle(self) -> None:
        """Let each live manager's exit follower handle every exit its launcher reported."""
        for _ in range(100):
            if not any(m.launcher.pending_exits() for m in self.managers if m.alive):
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("exit events left unhandled")
        await asyncio.sleep(0)

    async def close(self) -> None:
        for manager in self.managers:
            if manager.alive:
                await self.kill_manager(manager)

    # --- what tests look at ----------------------------------------------------------------------

    def running(self) -> set[str]:
        return self.host.running()

    def started(self) -> list[str]:
        """Every worker started on the host, in order."""
        return list(self.host.workers)
