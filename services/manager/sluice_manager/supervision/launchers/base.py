"""The seam between the reconcile loop and whatever runs workers: local processes, containers on a
Docker engine, or someone else (compose, a Kubernetes Deployment). The reconciler speaks only this
protocol; a launcher is chosen by name from :mod:`sluice_manager.supervision.launchers.registry`.

Everything a launcher must remember about a worker lives in its :class:`LaunchRecord`, kept in Redis
(:data:`sluice.redis.keys.LAUNCHED_WORKERS`) so that a restarted manager adopts what its predecessor
started: the generic fields every launcher has, the :class:`Placement` the policy chose (so a
restarted manager does not hand out a GPU an adopted worker holds), and launcher-specific ``details``
(a process's start time and log file, a container's name).
"""

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict


class Placement(BaseModel):
    """Where and with what a worker runs, as :func:`sluice_manager.supervision.placement.place` chose
    it from the launcher's :class:`Capacity`."""

    model_config = ConfigDict(frozen=True)

    # The host (or engine) the worker runs on, as the launcher names it.
    host: str
    torch_threads: int = 1
    # The GPU as the host numbers it; None: the CPU.
    gpu_id: int | None = None


@dataclass(frozen=True)
class ContainerLimits:
    """Resource limits of one worker container (0: no limit). Process workers ignore them."""

    cpus: float = 0.0
    memory_bytes: int = 0


@dataclass(frozen=True)
class WorkerSpec:
    """One worker to start: ``python -m sluice_worker --model-name ... --worker-id ...``."""

    model_name: str
    version: str
    worker_id: str
    placement: Placement
    limits: ContainerLimits = field(default_factory=ContainerLimits)

    def arguments(self, *, gpu_id: int | None = None) -> list[str]:
        """The worker's command-line arguments. ``gpu_id`` overrides the placement's GPU id with the
        one the worker sees (a container given one GPU sees it as device 0)."""
        args = [
            "--model-name",
            self.model_name,
            "--model-version",
            self.version,
            "--worker-id",
            self.worker_id,
        ]
        args += ["--torch-threads", str(self.placement.torch_threads)]
        visible = self.placement.gpu_id if gpu_id is None else gpu_id
        if self.placement.gpu_id is not None and visible is not None:
            args += ["--gpu-id", str(visible)]
        return args


# Details launchers record where they apply: a container's short id and the cluster node a worker
# runs on (Describe shows them), and the file a worker's output goes to (`sluice start` shows its
# tail when a startup model fails).
CONTAINER = "container"
NODE = "node"
LOG_PATH = "log_path"


class LaunchRecord(BaseModel):
    """A worker a launcher started (or adopted), as kept in Redis."""

    model_config = ConfigDict(frozen=True)

    worker_id: str
    model_name: str
    version: str
    launcher: str
    # What the launcher addresses the worker by: a pid, a container id.
    handle: str
    placement: Placement
    started_unix_ms: int
    stop_requested_unix_ms: int = 0
    # When the reconciler first saw it READY (0: not yet). Kept here because the worker's own record
    # does not last: a peer deletes it once the heartbeat lapses, and a hung worker that was READY
    # must not pass for one still loading.
    ready_unix_ms: int = 0
    # Launcher-specific facts (see each launcher).
    details: dict[str, str] = {}

    @property
    def host(self) -> str:
        return self.placement.host

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, raw: str | bytes) -> "LaunchRecord":
        return cls.model_validate_json(raw)


@dataclass
class Watched:
    """A worker a container launcher runs or adopted, and whether its exit was reported yet."""

    record: LaunchRecord
    exited: bool = False


@dataclass(frozen=True)
class Capacity:
    """What a launcher can place workers on: one host's cores and GPUs (as the host numbers them)."""

    host: str
    cpus: int
    gpu_ids: tuple[int, ...] = ()


class RunState(enum.StrEnum):
    RUNNING = "running"
    EXITED = "exited"


@dataclass(frozen=True)
class WorkerExit:
    """A worker the launcher runs has ended; ``exit_code`` None when it is not known."""

    worker_id: str
    exit_code: int | None
    # A word on why, where the launcher knows more than the code ("oom-killed").
    reason: str = ""


@dataclass(frozen=True)
class Usage:
    """What a worker uses, as the launcher measures it (Describe's ``memoryUsage``)."""

    memory_bytes: int


class Launcher(Protocol):
    """Starts, stops and watches workers. Every method may be called from the reconcile loop only,
    except :meth:`exits`, which the reconciler drains in a task of its own."""

    name: str
    # False for launchers that cannot start workers (external): the reconciler then only watches.
    can_start: bool
    # True when workers keep running after the manager exits, for its successor to adopt (containers);
    # False when stopping the manager stops its workers (local processes under `sluice stop`).
    workers_outlive_manager: bool

    async def prepare(self) -> None:
        """Get ready to start workers (the process launcher starts its standby worker)."""
        ...

    async def capacity(self) -> Capacity:
        """Cores and GPUs the launcher places workers on."""
        ...

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        """Start a worker; returns once the process (or container) exists."""
        ...

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        """SIGTERM (graceful: the worker drains) or SIGKILL a worker this launcher runs or adopted
        (any other id is ignored)."""
        ...

    async def states(self) -> dict[str, RunState]:
        """Workers this launcher runs or adopted and has not released, by id."""
        ...

    async def adopt(self, records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
        """Take over workers a previous manager started (or found without a record); returns the
        records of those that still run and are now watched, as the launcher knows them."""
        ...

    async def discover(self) -> list[LaunchRecord]:
        """Running workers of this cluster that the launcher can see by itself, whether recorded or
        not (containers, by their labels). Launchers that cannot return [] (the reconciler then finds
        local workers through their announcement)."""
        ...

    def exits(self) -> AsyncIterator[WorkerExit]:
        """Each exit of a watched worker, once, as it happens (until :meth:`aclose`)."""
        ...

    async def release(self, worker_id: str) -> None:
        """Forget an exited worker (a container is removed)."""
        ...

    async def usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        """What each of ``records`` uses, for the workers the launcher can measure."""
        ...

    async def aclose(self) -> None:
        """Stop watching; the workers keep running (a restarted manager adopts them)."""
        ...
