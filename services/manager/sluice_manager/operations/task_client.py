"""The manager's side of the control-plane tasks: submit an operation to Celery, and resubmit the open
operations nobody runs (their task died with a manager, or its message waits for Celery's visibility
timeout). Resubmitting is safe: the task of a finished or running operation does nothing."""

import asyncio

from celery import Celery
from sluice.log import get_logger

from sluice_manager.operations import celery_app
from sluice_manager.stores.operations import OperationStore

log = get_logger(__name__)


class TaskClient:
    def __init__(self, app: Celery, ops: OperationStore, *, orphan_after_s: float = 30.0) -> None:
        self._app = app
        self._ops = ops
        self._orphan_after_s = orphan_after_s

    async def submit(self, op_id: str) -> None:
        # kombu publishes synchronously; its producer pool is thread-safe.
        await asyncio.to_thread(celery_app.submit, self._app, op_id)

    async def resubmit_orphans(self) -> int:
        orphans = await self._ops.orphaned(self._orphan_after_s)
        for op_id in orphans:
            log.warning("resubmitting an operation nobody runs", op=op_id)
            await self.submit(op_id)
        return len(orphans)

    async def sweep_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.resubmit_orphans()
            except Exception as exc:  # Redis or the broker unreachable: try again next round
                log.warning("operation sweep skipped", error=repr(exc))
            await asyncio.sleep(interval_s)
