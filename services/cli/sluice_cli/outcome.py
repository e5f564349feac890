"""What a start or a supervised run reports: each startup model's workers, and why Sluice could not
start or had to stop. A module of its own so that the CLI can report without importing the readiness
checks (grpc, redis) first."""

from dataclasses import dataclass, field
from pathlib import Path


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop in order."""


class Failure(Exception):
    """Sluice cannot go on; ``logs`` are worth showing the user."""

    def __init__(self, reason: str, logs: list[Path] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.logs = logs or []


class StartFailed(Failure):
    """Startup cannot succeed."""


class GaveUp(Failure):
    """A service crashed in a loop and is no longer restarted."""


@dataclass(frozen=True)
class ModelStatus:
    model_name: str
    version: str
    min_workers: int
    ready_workers: int
    worker_logs: list[Path] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.ready_workers >= self.min_workers
