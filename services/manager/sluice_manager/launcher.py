"""The seam between the reconcile loop and whatever runs workers: local processes, containers, or
someone else (compose). The reconciler only speaks this protocol."""

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class WorkerSpec:
    """One worker to start: ``python -m sluice_worker --model-name ... --worker-id ...``."""

    model_name: str
    version: str
    worker_id: str
    torch_threads: int = 1
    gpu_id: int | None = None

    def arguments(self) -> list[str]:
        args = [
            "--model-name",
            self.model_name,
            "--model-version",
            self.version,
            "--worker-id",
            self.worker_id,
        ]
        args += ["--torch-threads", str(self.torch_threads)]
        if self.gpu_id is not None:
            args += ["--gpu-id", str(self.gpu_id)]
        return args


class LaunchRecord(BaseModel):
    """A worker a launcher started, as kept in :data:`sluice.keys.LAUNCHED_WORKERS` so that a restarted
    manager can find (and adopt or clean up) what its predecessor started."""

    model_config = ConfigDict(frozen=True)

    worker_id: str
    model_name: str
    version: str
    launcher: str
    host: str
    pid: int | None = None
    # The process's start time as the OS reports it: a pid alone may have been reused.
    process_start_time: float | None = None
    started_unix_ms: int
    log_path: str = ""
    stop_requested_unix_ms: int = 0
    # When the reconciler first saw it READY (0: not yet). Kept here because the worker's own record
    # does not last: a peer deletes it once the heartbeat lapses.
    ready_unix_ms: int = 0
    # A word of the process's command line that marks it as ours ("": its worker id).
    marker: str = ""

    @property
    def command_marker(self) -> str:
        return self.marker or self.worker_id

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, raw: str | bytes) -> "LaunchRecord":
        return cls.model_validate_json(raw)


class ProcessState(enum.StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    # Not run by this launcher: only the worker's own records in Redis tell whether it lives.
    UNKNOWN = "unknown"


# Called once when a worker the launcher runs exits: (worker id, exit code or None if unknown).
ExitHandler = Callable[[str, int | None], Awaitable[None]]


class Launcher(Protocol):
    name: str
    # False for launchers that cannot start workers (external): the reconciler then only watches.
    can_start: bool

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        """Start a worker; returns once the process (or container) exists."""
        ...

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        """SIGTERM (graceful: the worker drains) or SIGKILL a worker this launcher runs."""
        ...

    def list(self) -> dict[str, ProcessState]:
        """Workers this launcher runs or has adopted, by id, with their process state."""
        ...

    def adopt(self, record: LaunchRecord) -> bool:
        """Take over a worker a previous manager started, if it still runs; False otherwise."""
        ...

    def forget(self, worker_id: str) -> None:
        """Drop an exited worker from :meth:`list`."""
        ...

    async def prepare(self) -> None:
        """Get ready to start workers quickly (the process launcher starts its standby worker)."""
        ...

    async def aclose(self) -> None: ...
