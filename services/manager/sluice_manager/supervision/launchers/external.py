"""The ``external`` launcher: someone else starts the workers (``docker compose up --scale
worker=N`` with a worker service of your own, a Kubernetes Deployment, workers on other hosts started
by hand). It starts and stops nothing; the reconciler still counts the workers that announce
themselves, reports the count it wants (Describe, metrics), and cleans up the records of workers whose
heartbeat stopped."""

import asyncio
from collections.abc import AsyncIterator, Sequence

from sluice.log import get_logger

from sluice_manager.supervision.launchers.base import (
    Capacity,
    LaunchRecord,
    RunState,
    Usage,
    WorkerExit,
    WorkerSpec,
)

log = get_logger(__name__)

NAME = "external"


class ExternalLauncher:
    name = NAME
    can_start = False
    workers_outlive_manager = True

    def __init__(self, host: str) -> None:
        self._host = host
        self._closed = asyncio.Event()

    async def prepare(self) -> None:
        return None

    async def capacity(self) -> Capacity:
        return Capacity(host=self._host, cpus=0)

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        raise RuntimeError("the external launcher does not start workers")

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        log.warning("cannot stop an externally started worker; scale it down where it runs", worker=worker_id)

    async def states(self) -> dict[str, RunState]:
        return {}

    async def adopt(self, records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
        return []

    async def discover(self) -> list[LaunchRecord]:
        return []

    async def exits(self) -> AsyncIterator[WorkerExit]:
        await self._closed.wait()
        return
        yield  # an async generator that yields nothing

    async def release(self, worker_id: str) -> None:
        return None

    async def usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        return {}

    async def aclose(self) -> None:
        self._closed.set()
