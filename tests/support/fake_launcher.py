"""An in-memory launcher for the unit tier: workers are entries in a shared :class:`FakeHost` (so a
second launcher, a restarted manager, can adopt them), and a test makes one exit with
:meth:`FakeHost.exit`. Times come from the host's clock (simulated in the reconcile loop's tests).
It passes the launcher contract (tests/support/launcher_contract.py), so tests that drive the
reconciler through it rely on what every real launcher does."""

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from sluice_manager.supervision.launchers.base import (
    Capacity,
    LaunchRecord,
    RunState,
    Usage,
    WorkerExit,
    WorkerSpec,
)

NAME = "fake"
STOPPED = 0
KILLED = -9


@dataclass
class FakeWorker:
    spec: WorkerSpec
    handle: str
    started_s: float
    running: bool = True
    exit_code: int | None = None
    ended_s: float | None = None
    # A graceful stop was asked (it drains, then exits; see FakeHost.slow_to_stop).
    stopping: bool = False


@dataclass
class FakeHost:
    """The "machine" fake workers run on, shared by every launcher a test makes."""

    name: str = "fake-host"
    cpus: int = 4
    gpu_ids: tuple[int, ...] = ()
    workers: dict[str, FakeWorker] = field(default_factory=dict)
    launchers: list["FakeLauncher"] = field(default_factory=list)
    handles: "itertools.count[int]" = field(default_factory=lambda: itertools.count(1000))
    clock: Callable[[], float] = time.time
    # Workers that keep running after a graceful stop (still draining, or deaf to SIGTERM) until they
    # exit by themselves or are killed; the others exit at once.
    slow_to_stop: set[str] = field(default_factory=set)

    def exit(self, worker_id: str, code: int | None) -> None:
        """The worker ends by itself (a crash, a failed load)."""
        worker = self.workers[worker_id]
        if not worker.running:
            return
        worker.running, worker.exit_code, worker.ended_s = False, code, self.clock()
        for launcher in self.launchers:
            launcher.notice(worker_id, code)

    def running(self) -> set[str]:
        return {worker_id for worker_id, worker in self.workers.items() if worker.running}


class FakeLauncher:
    name = NAME
    can_start = True
    workers_outlive_manager = False

    def __init__(self, host: FakeHost, *, fail_starts: bool = False) -> None:
        self.host = host
        self.fail_starts = fail_starts
        self.started: list[WorkerSpec] = []
        self._watched: dict[str, bool] = {}  # worker id -> exited
        self._exits: asyncio.Queue[WorkerExit] = asyncio.Queue()
        host.launchers.append(self)

    def pending_exits(self) -> int:
        """Exits reported and not yet taken from :meth:`exits`."""
        return self._exits.qsize()

    def notice(self, worker_id: str, code: int | None) -> None:
        if worker_id in self._watched and not self._watched[worker_id]:
            self._watched[worker_id] = True
            self._exits.put_nowait(WorkerExit(worker_id, code))

    async def prepare(self) -> None:
        return None

    async def capacity(self) -> Capacity:
        return Capacity(host=self.host.name, cpus=self.host.cpus, gpu_ids=self.host.gpu_ids)

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        if self.fail_starts:
            raise OSError("cannot start: fake failure")
        self.started.append(spec)
        now_s = self.host.clock()
        self.host.workers[spec.worker_id] = FakeWorker(spec, str(next(self.host.handles)), now_s)
        self._watched[spec.worker_id] = False
        if spec.version.startswith("exit-"):  # the contract's worker that fails to load
            self.host.exit(spec.worker_id, int(spec.version.removeprefix("exit-")))
        return LaunchRecord(
            worker_id=spec.worker_id,
            model_name=spec.model_name,
            version=spec.version,
            launcher=self.name,
            handle=self.host.workers[spec.worker_id].handle,
            placement=spec.placement,
            started_unix_ms=int(now_s * 1000),
        )

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        if worker_id not in self._watched or worker_id not in self.host.workers:
            return
        if graceful:
            self.host.workers[worker_id].stopping = True
            if worker_id in self.host.slow_to_stop:
                return
        self.host.exit(worker_id, STOPPED if graceful else KILLED)

    async def states(self) -> dict[str, RunState]:
        return {wid: RunState.EXITED if exited else RunState.RUNNING for wid, exited in self._watched.items()}

    async def adopt(self, records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
        adopted = []
        for record in records:
            worker = self.host.workers.get(record.worker_id)
            if record.launcher != self.name or worker is None or not worker.running:
                continue
            if record.worker_id in self._watched or worker.handle != record.handle:
                continue
            self._watched[record.worker_id] = False
            adopted.append(record)
        return adopted

    async def discover(self) -> list[LaunchRecord]:
        return []

    async def exits(self) -> AsyncIterator[WorkerExit]:
        while True:
            yield await self._exits.get()

    async def release(self, worker_id: str) -> None:
        if self._watched.get(worker_id):
            del self._watched[worker_id]

    async def usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        return {r.worker_id: Usage(memory_bytes=1024) for r in records if r.worker_id in self.host.running()}

    async def aclose(self) -> None:
        self.host.launchers.remove(self)
