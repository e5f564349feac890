"""What the gateway needs of the broker, and nothing of how it does it: a :class:`JobAdmission` that
puts a job in its version's queue (or says why not) and flags abandoned jobs, and a
:class:`ReplySource` that hands each job's replies to the call waiting for them (the data plane's two
seams); and a :class:`ClusterReader` for what the rest of the gateway reads off the hot path (the
registry for the registry cache, health, readiness, metadata and metrics).

The Redis implementations are :mod:`.redis_admission`, :mod:`.redis_replies` and
:mod:`.redis_reader`; the unit tests use in-memory ones. A broker that cannot be reached raises
:class:`BrokerUnavailable`, never its client's own errors.
"""

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.registry.reader import ModelRouting
from sluice.registry.records import StartupReport, VersionRecord, WorkerRecord
from sluice.registry.workflows import WorkflowRecord

from sluice_gateway.metrics.cluster import VersionStats
from sluice_gateway.waiters import StreamWaiter, UnaryWaiter

# What a client is told when the broker (the job queues and the registry in it) cannot be reached.
UNAVAILABLE_MESSAGE = "Service unavailable: the job queue is unreachable."


class BrokerUnavailable(Exception):
    """The broker could not be reached or did not answer."""


class Admission(enum.Enum):
    """The outcome of an enqueue."""

    ADMITTED = "admitted"
    # Admitted while the version runs no worker (it scales from zero): the job waits for one to start.
    ADMITTED_COLD = "admitted_cold"
    # The version is not (or no longer) active: the caller's view of the registry was stale.
    VERSION_GONE = "version_gone"
    NO_WORKER = "no_worker"
    # The queue holds `job_queue_size` jobs, or the broker is out of memory.
    QUEUE_FULL = "queue_full"
    # Sequences (stateful models): the sequence ended, idled out or timed out; a request that does
    # not start it names no live sequence; too many live sequences, or jobs queued for this one.
    SEQUENCE_CLOSED = "sequence_closed"
    SEQUENCE_START_REQUIRED = "sequence_start_required"
    SEQUENCE_LIMIT = "sequence_limit"


@dataclass(frozen=True)
class SequenceStep:
    """Where a stateful model's job goes: its sequence, and whether it starts or ends it."""

    sequence_id: str
    # True starts the sequence (again); False joins a live one; None starts it unless it was seen
    # and closed (TorchServe: a new id starts a sequence; KServe v2 asks for START explicitly).
    start: bool | None = None
    end: bool = False


class JobAdmission(Protocol):
    async def enqueue(self, model: str, version: str, job: bytes) -> Admission:
        """Put the encoded job in the version's queue if the version is active, has a worker and
        room for it, in one atomic step; raises :class:`BrokerUnavailable`. A job may be queued when
        the call is cancelled during the enqueue."""
        ...

    async def enqueue_sequence(self, record: VersionRecord, job: bytes, step: SequenceStep) -> Admission:
        """Put the job in its sequence's queue, for the worker holding the sequence (a new sequence
        gets the live worker holding the fewest); the version's sequence limits apply."""
        ...

    def cancel(self, model: str, version: str, job_id: str, ttl_ms: int) -> None:
        """Flag a job whose caller left, for ``ttl_ms``, so that workers skip it. Off the caller's
        path and best effort: it never raises."""
        ...


class ReplySource(Protocol):
    @property
    def reply_to(self) -> str:
        """Where workers send the replies of the jobs expected here (``Job.reply_to``)."""
        ...

    def expect(self, job_id: str) -> UnaryWaiter:
        """Wait for the job's first final reply."""
        ...

    def expect_stream(self, job_id: str, limit: int) -> StreamWaiter:
        """Buffer every reply of the job, up to ``limit``."""
        ...

    def forget(self, job_id: str) -> None:
        """Stop waiting for the job: its later replies are dropped."""
        ...


class ClusterReader(Protocol):
    """The registry and the cluster's state, read off the hot path: each call is one read (or one
    batch of reads) of the broker; :class:`BrokerUnavailable` when it does not answer. Records that
    cannot be parsed raise ``ValueError``."""

    async def model_names(self) -> list[str]:
        """Every registered model, in name order."""
        ...

    async def model_versions(self, model: str) -> tuple[str | None, set[str]]:
        """(default version, every version) of ``model``; (None, set()) when it is not registered."""
        ...

    async def model_routing(self, model: str) -> ModelRouting:
        """The default version, every version and the traffic weights of ``model`` (empty when it is
        not registered)."""
        ...

    async def sequence_version(self, model: str, versions: Sequence[str], sequence_id: str) -> str | None:
        """Which of ``versions`` holds the live sequence ``sequence_id`` (a stateful model); None."""
        ...

    async def version_record(self, model: str, version: str) -> VersionRecord | None:
        """The version's record; None when it is not registered."""
        ...

    async def live_workers(self, model: str, version: str) -> list[WorkerRecord]:
        """Workers of the version that announced themselves and whose heartbeat is alive."""
        ...

    async def workflow(self, name: str) -> WorkflowRecord | None:
        """The registered workflow ``name``; None when there is none."""
        ...

    async def startup_report(self) -> StartupReport | None:
        """The manager's report on its startup models; None before a manager wrote one."""
        ...

    async def version_stats(self) -> list[VersionStats]:
        """Every version's queue depth, live workers, batch sizes and autoscaling target, at once."""
        ...

    async def answers(self, timeout_s: float) -> bool:
        """Whether the broker answers within ``timeout_s`` (never raises)."""
        ...
