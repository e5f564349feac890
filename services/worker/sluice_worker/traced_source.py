"""Spans of the worker's part of a traced call (tracing on, :mod:`sluice.tracing`): a job source that
hands jobs on unchanged and, as each traced job is finished, records under the gateway's span (the
job's ``traceparent``):

- ``sluice.worker.job``, from the job's admission to its final reply, with the model, version,
  worker, request id, delivery and status as attributes, and under it
- ``queue wait``: admission to the worker reading it (its wait in the version's stream),
- ``batch formation``: reading it to handing its batch to the handler (the batching delay, and the
  batch before it finishing),
- ``handler``: the handler's run (for continuous batching, from its first iteration to its last).

The times are taken as the job passes (reading, the reply's ``started_unix_ms``, finishing) and the
spans are recorded at once when it is done, so nothing of OpenTelemetry runs on the handler's thread.
Jobs without a ``traceparent`` cost a dictionary lookup; the loop does not know tracing exists.
"""

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from typing import TYPE_CHECKING

from sluice_worker.broker.source import JobSource
from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing
from sluice_worker.sequence_state import NO_STATES, StateUpdate

if TYPE_CHECKING:  # OpenTelemetry is imported only when tracing is on
    from sluice.tracing.otel import Tracing

MS = 1_000_000


class TracedSource:
    def __init__(
        self,
        source: JobSource,
        tracing: "Tracing",
        worker_id: str,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._source = source
        self._tracing = tracing
        self._worker_id = worker_id
        self._clock_ns = clock_ns
        # Receipt -> when a traced job was read.
        self._received: dict[bytes, int] = {}

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        return self._note(await self._source.read(count, block_ms))

    async def rescue(self, held: Set[bytes]) -> list[Delivery]:
        return self._note(await self._source.rescue(held))

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        return await self._source.cancelled(deliveries)

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        await self._source.publish(outgoing)

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        *,
        batch_size: int = 0,
        states: Mapping[str, StateUpdate] = NO_STATES,
    ) -> Awaitable[None]:
        now_ns = self._clock_ns()
        finals = {item.reply.job_id: item for item in outgoing if item.reply.final}
        for delivery in done:
            received_ns = self._received.pop(delivery.receipt, None)
            if received_ns is not None:
                self._record(delivery, received_ns, now_ns, finals.get(delivery.job_id))
        return self._source.finish(outgoing, done, batch_size=batch_size, states=states)

    async def leave(self) -> None:
        await self._source.leave()

    def _note(self, deliveries: list[Delivery]) -> list[Delivery]:
        now_ns = self._clock_ns()
        for delivery in deliveries:
            if delivery.job.traceparent:
                self._received.setdefault(delivery.receipt, now_ns)
        return deliveries

    def _record(self, delivery: Delivery, received_ns: int, end_ns: int, final: Outgoing | None) -> None:
        job = delivery.job
        admitted_ns = min(job.enqueued_unix_ms * MS, received_ns) if job.enqueued_unix_ms else received_ns
        children = [("queue wait", admitted_ns, received_ns)]
        started_ms = final.reply.started_unix_ms if final is not None else 0
        if started_ms:
            started_ns = min(max(started_ms * MS, received_ns), end_ns)
            children += [("batch formation", received_ns, started_ns), ("handler", started_ns, end_ns)]
        status = final.reply.status_code if final is not None else 0
        attributes = {
            "sluice.model": job.model_name,
            "sluice.version": job.model_version,
            "sluice.worker": self._worker_id,
            "sluice.request_id": job.job_id,
            "sluice.attempt": delivery.attempt,
            "sluice.status_code": status,
        }
        error = final.reply.message if final is not None and final.reply.error_code else ""
        self._tracing.record(
            job.traceparent,
            job.tracestate,
            "sluice.worker.job",
            admitted_ns,
            end_ns,
            children,
            attributes,
            error,
        )
