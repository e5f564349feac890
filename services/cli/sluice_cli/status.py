"""What a start reports: each startup model's workers, and why a start failed. A module of its own
so that the CLI can report without importing the readiness checks (grpc, redis) first."""

from dataclasses import dataclass, field
from pathlib import Path


class StartFailed(Exception):
    """Startup cannot succeed; ``logs`` are worth showing the user."""

    def __init__(self, reason: str, logs: list[Path] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.logs = logs or []


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
