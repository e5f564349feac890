"""The seam between supervision and the state it keeps: what the reconcile loop, the autoscaler's step
(:mod:`.scaler`) and adoption read and write, as Protocols, with the values that cross it.

:class:`sluice_manager.supervision.worker_state.WorkerStateStore` implements them on Redis (so a
restarted manager picks up where its predecessor stopped); the unit tier drives the loop through an
in-memory store on a simulated clock (tests/support/memory_worker_state.py).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel
from sluice.registry.records import VersionRecord, WorkerRecord

from sluice_manager.supervision.autoscale import ScalingState, Signal
from sluice_manager.supervision.launchers.base import LaunchRecord

VersionKey = tuple[str, str]


@dataclass(frozen=True)
class RegisteredVersion:
    record: VersionRecord
    active: bool


@dataclass(frozen=True)
class AnnouncedWorker:
    record: WorkerRecord
    heartbeat: bool


class RestartStreak(BaseModel):
    """Consecutive unexpected exits of a version's workers (reset when one of them is READY)."""

    failures: int = 0
    first_failure_unix_ms: int = 0
    last_failure_unix_ms: int = 0
    # The log of the worker that failed last ("" when its launcher keeps no log file): what
    # `sluice start` shows when a startup model's workers keep failing.
    last_failure_log: str = ""


class ScalingStore(Protocol):
    """What the autoscaler's step reads and keeps for a version."""

    async def scaling_state(self, model: str, version: str) -> ScalingState | None:
        """The state the policy left at the version's last pass (None: never looked at)."""
        ...

    async def put_scaling_state(self, model: str, version: str, state: ScalingState) -> None: ...

    async def signal(
        self,
        model: str,
        version: str,
        at_s: float,
        workers: Mapping[str, AnnouncedWorker],
        *,
        stateful: bool = False,
    ) -> Signal:
        """The version's load at ``at_s``; ``workers`` (as :meth:`SupervisionStore.announced` read
        them) give its busy share, those whose heartbeat lapsed counting for none."""
        ...


class SupervisionStore(ScalingStore, Protocol):
    """What the reconcile loop and adoption read and write: registered versions, launch records, the
    workers' own records and heartbeats, who holds jobs, restart streaks and worker ids."""

    async def registered_versions(self) -> dict[VersionKey, RegisteredVersion]: ...

    async def launched(self) -> dict[str, LaunchRecord]:
        """Every launch record, by worker id (of every version and launcher)."""
        ...

    async def launched_one(self, worker_id: str) -> LaunchRecord | None: ...

    async def put_launched(self, record: LaunchRecord) -> None: ...

    async def forget_worker(self, model: str, version: str, worker_id: str) -> None:
        """Drop a gone worker's launch record, its own record and its heartbeat (at once: its peers
        may then claim its pending jobs)."""
        ...

    async def announced(self, model: str, version: str) -> dict[str, AnnouncedWorker]:
        """The workers that announced themselves for the version, each with whether its heartbeat
        is alive now."""
        ...

    async def busy_workers(self, model: str, version: str, *, stateful: bool = False) -> set[str]:
        """Workers holding unacknowledged jobs (a stateful version: holding sequences)."""
        ...

    async def restart_streak(self, model: str, version: str) -> RestartStreak: ...

    async def record_failure(self, model: str, version: str, log_path: str = "") -> RestartStreak:
        """Count one more unexpected exit, stamped now; returns the streak it makes."""
        ...

    async def clear_streak(self, model: str, version: str) -> None: ...

    async def next_worker_id(self) -> str:
        """A fresh worker id, never handed out before."""
        ...
