"""An in-memory broker behind the data plane's two seams (:mod:`sluice_gateway.broker.seam`), so unit
tests drive the data plane without Redis: :class:`InMemoryAdmission` applies the admission rule
(:mod:`sluice.admission`, whose table tests/integration/shared/test_admission_rule.py checks) to
versions kept in a dict, :class:`InMemoryReplies` hands the replies a test sends to the waiting calls.
The Redis implementations are tested against a real redis-server in tests/integration/gateway."""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sluice.envelope import Job, Reply, decode_job
from sluice.errors import SluiceError
from sluice.registry.records import VersionRecord
from sluice_gateway.broker.seam import Admission, BrokerUnavailable, SequenceStep
from sluice_gateway.waiters import ReplyWaiters, StreamWaiter, UnaryWaiter


@dataclass
class Version:
    workers: int = 1
    queue_size: int = 100
    # Admits jobs while no worker runs (minWorkers 0): the manager starts one.
    scales_from_zero: bool = False
    queued: list[Job] = field(default_factory=list)


@dataclass(frozen=True)
class CancelFlag:
    model: str
    version: str
    job_id: str
    ttl_ms: int


class InMemoryAdmission:
    def __init__(self) -> None:
        self.versions: dict[tuple[str, str], Version] = {}
        # Sequence id -> whether it is live (False: closed); the outcome of the next sequence enqueue
        # can be forced with ``sequence_outcome``.
        self.sequences: dict[str, bool] = {}
        self.sequence_outcome: Admission | None = None
        self.cancelled: list[CancelFlag] = []
        # Raise BrokerUnavailable while set.
        self.down = False
        # When set, an enqueue waits for it (a slow broker: the call may be cancelled meanwhile).
        self.gate: asyncio.Event | None = None
        # How many of the next enqueues find their version gone (the caller's registry view was stale).
        self.gone_next = 0
        self.enqueued = asyncio.Event()

    def add_version(self, model: str, version: str, *, workers: int = 1, queue_size: int = 100) -> Version:
        self.versions[(model, version)] = Version(workers, queue_size)
        return self.versions[(model, version)]

    async def enqueue(self, model: str, version: str, job: bytes) -> Admission:
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise BrokerUnavailable("in-memory broker down")
        target = self.versions.get((model, version))
        if self.gone_next > 0:
            self.gone_next -= 1
            return Admission.VERSION_GONE
        if target is None:
            return Admission.VERSION_GONE
        if target.workers == 0 and not target.scales_from_zero:
            return Admission.NO_WORKER
        if len(target.queued) >= target.queue_size:
            return Admission.QUEUE_FULL
        target.queued.append(decode_job(job))
        self.enqueued.set()
        return Admission.ADMITTED_COLD if target.workers == 0 else Admission.ADMITTED

    async def enqueue_sequence(self, record: VersionRecord, job: bytes, step: SequenceStep) -> Admission:
        """A sequence's job: joins a live sequence, starts one (implicitly, unless it was closed)."""
        if self.sequence_outcome is not None:
            return self.sequence_outcome
        live = self.sequences.get(step.sequence_id)
        if not live:
            if step.start is False:
                return Admission.SEQUENCE_CLOSED if live is False else Admission.SEQUENCE_START_REQUIRED
            if live is False and step.start is None:
                return Admission.SEQUENCE_CLOSED
        self.sequences[step.sequence_id] = not step.end
        return await self.enqueue(record.model_name, record.version, job)

    def cancel(self, model: str, version: str, job_id: str, ttl_ms: int) -> None:
        self.cancelled.append(CancelFlag(model, version, job_id, ttl_ms))

    async def take(self, model: str = "echo", version: str = "1.0") -> Job:
        """The oldest queued job of the version, as a worker would read it (waits for one)."""
        queued = self.versions[(model, version)].queued
        async with asyncio.timeout(5):
            while not queued:
                self.enqueued.clear()
                await self.enqueued.wait()
        return queued.pop(0)

    def jobs(self, model: str = "echo", version: str = "1.0") -> list[Job]:
        return list(self.versions[(model, version)].queued)


class InMemoryReplies:
    reply_to = "memory:replies"

    def __init__(self) -> None:
        self.waiters = ReplyWaiters()

    def expect(self, job_id: str) -> UnaryWaiter:
        return self.waiters.expect(job_id)

    def expect_stream(self, job_id: str, limit: int) -> StreamWaiter:
        return self.waiters.expect_stream(job_id, limit)

    def forget(self, job_id: str) -> None:
        self.waiters.forget(job_id)

    def send(self, job_id: str, **fields: Any) -> None:
        """A worker's reply to the job."""
        self.waiters.deliver(Reply(job_id=job_id, **fields))

    def lose(self, error: SluiceError) -> int:
        """The reply path was lost: every call waiting so far fails with ``error``."""
        return self.waiters.fail_before(self.waiters.mark(), error)


class InMemoryBroker:
    """Both seams, for one data plane."""

    def __init__(self) -> None:
        self.admission = InMemoryAdmission()
        self.replies = InMemoryReplies()
