"""The ``external`` launcher: someone else starts the workers (``docker compose up --scale worker=N``,
a Kubernetes Deployment). It starts and stops nothing; the reconciler still counts the workers that
announce themselves and cleans up the records of those whose heartbeat stopped."""

from sluice.log import get_logger

from sluice_manager.supervision.launchers.legacy_base import LaunchRecord, ProcessState, WorkerSpec

log = get_logger(__name__)


class ExternalLauncher:
    name = "external"
    can_start = False

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        raise RuntimeError("the external launcher does not start workers")

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        log.warning("cannot stop an externally started worker; scale it down where it runs", worker=worker_id)

    def list(self) -> dict[str, ProcessState]:
        return {}

    def adopt(self, record: LaunchRecord) -> bool:
        return False

    def forget(self, worker_id: str) -> None:
        return None

    async def prepare(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
