"""The transport-agnostic inference data plane: resolve model/version, enqueue one Job, then await
its final reply or iterate its replies.

Transports (TorchServe and KServe v2, gRPC and REST) convert their request into an
:class:`InferenceCall`, call the data plane once, and convert the replies back. Failures are raised
as :class:`sluice.errors.SluiceError`; the transport maps them to its status codes once. The broker
is reached through two seams (:mod:`sluice_gateway.broker.seam`): job admission and a reply source.
"""

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog
from sluice.envelope import Reply, WireProtocol, encode_job_with_request
from sluice.errors import ErrorCode, SluiceError, no_worker_message
from sluice.registry import names
from sluice.registry.records import VersionRecord
from sluice.v1.job_pb2 import SharedMemorySpan

from sluice_gateway.broker.seam import (
    UNAVAILABLE_MESSAGE,
    Admission,
    BrokerUnavailable,
    JobAdmission,
    ReplySource,
    SequenceStep,
)
from sluice_gateway.inflight import PendingJob, StreamJob, UnaryJob
from sluice_gateway.job_envelopes import build_job, effective_timeout_s, new_job_id
from sluice_gateway.registry_cache import VersionResolver, model_not_found, version_not_found
from sluice_gateway.sequences import SEQUENCE_ID_REQUIRED, SequenceHeaders, checked, new_sequence, refusal

# Read once: the hot path compares every enqueue's outcome with it.
_ADMITTED = Admission.ADMITTED
SEQUENCE_REFUSALS = frozenset(
    {Admission.SEQUENCE_CLOSED, Admission.SEQUENCE_START_REQUIRED, Admission.SEQUENCE_LIMIT}
)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class InferenceCall:
    """One inference request as every transport hands it to the data plane."""

    protocol: "WireProtocol.ValueType"
    model: str
    # "" selects the model's default version.
    version: str
    # The client's request, forwarded to the worker undecoded.
    request: bytes
    # Time the client still waits (its deadline); None when it set none.
    timeout_s: float | None = None
    headers: Mapping[str, str] | None = None
    # Checks the request against the version it resolved to, before anything is enqueued (raises
    # SluiceError); KServe v2 validates tensors against the declared ones here.
    admit: Callable[[VersionRecord], None] | None = None
    # A streamed call whose job may still share a batch (REST: the handler, not the client,
    # decides whether the answer streams); the job is not flagged ``streaming``.
    stream_in_batch: bool = False
    # The sequence the request names (its handler headers say so, whatever the model); a stateful
    # model routes it to the worker holding the sequence (sluice_gateway.sequences).
    sequence: SequenceStep | None = None
    # What a stateful model's call that names no sequence gets: an error with this message, or
    # (None) a new sequence, as TorchServe's REST API makes one.
    missing_sequence: str | None = SEQUENCE_ID_REQUIRED
    # KServe v2 tensors in system shared memory: the spans the worker reads and writes.
    shm_inputs: Sequence[SharedMemorySpan] = ()
    shm_outputs: Sequence[SharedMemorySpan] = ()


class JobObserver(Protocol):
    """Told about every job whose version was found (queued or refused by the queue), about each
    chunk of a call that streams, and about every such job once its caller is done with it
    (metrics; must not block)."""

    def admitted(self, model: str, requested_version: str) -> None: ...

    def streamed(self, job: PendingJob, wait_ns: int, first: bool) -> None:
        """A streaming call yielded a chunk, ``wait_ns`` after the job was queued (the first chunk)
        or after its previous chunk."""
        ...

    def finished(self, job: PendingJob) -> None: ...


class DataPlane:
    def __init__(
        self,
        resolver: VersionResolver,
        admission: JobAdmission,
        replies: ReplySource,
        *,
        default_timeout_s: float | None = None,
        stream_buffer_replies: int = 1024,
        cancel_margin_s: float = 60.0,
        clock_ms: Callable[[], int] = wall_clock_ms,
        observer: JobObserver | None = None,
        sequence_headers: SequenceHeaders | None = None,
        trace_context: Callable[[], tuple[str, str]] | None = None,
    ) -> None:
        """``trace_context``: the current span's ``traceparent`` and ``tracestate``, put into each job
        (None: tracing is off)."""
        self._resolver = resolver
        self._admission = admission
        self._replies = replies
        self._reply_to = replies.reply_to
        self._default_timeout_s = default_timeout_s
        self._stream_buffer_replies = stream_buffer_replies
        self._cancel_margin_ms = int(cancel_margin_s * 1000)
        self._clock_ms = clock_ms
        self._observer = observer
        self._on_chunk = observer.streamed if observer is not None else None
        self._sequence_headers = sequence_headers or SequenceHeaders()
        self._trace_context = trace_context

    async def infer(self, call: InferenceCall) -> Reply:
        """Run one job and return its final reply."""
        job = await self.submit(call)
        try:
            return await job.result()
        finally:
            job.close()

    async def infer_stream(self, call: InferenceCall) -> AsyncGenerator[Reply, None]:
        """Run one streaming job and yield its replies as they arrive, the final one last."""
        job = await self.submit_stream(call)
        try:
            async for reply in job.replies():
                yield reply
        finally:
            job.close()

    async def submit(self, call: InferenceCall) -> UnaryJob:
        job = await self._admit(call, streaming=False)
        assert isinstance(job, UnaryJob)
        return job

    async def submit_stream(self, call: InferenceCall) -> StreamJob:
        job = await self._admit(call, streaming=True)
        assert isinstance(job, StreamJob)
        return job

    def _release(self, job: PendingJob, cancel: bool) -> None:
        self._replies.forget(job.job_id)
        if self._observer is not None:
            self._observer.finished(job)
        if cancel:
            ttl_ms = max(job.deadline_ms - self._clock_ms(), 0) + self._cancel_margin_ms
            self._admission.cancel(job.model, job.version, job.job_id, ttl_ms)

    async def _admit(self, call: InferenceCall, *, streaming: bool) -> PendingJob:
        model = names.check_model_name(call.model)
        if call.version:
            names.check_version(model, call.version)
        for _look in range(2):
            record = await self._resolver.resolve(model, call.version, call.sequence)
            pending = await self._enqueue(call, record, streaming)
            if pending is not None:
                return pending
            # The cached registry was stale (version removed, default changed): look again, once.
            self._resolver.invalidate(model)
        raise version_not_found(model, call.version) if call.version else model_not_found(model)

    async def _enqueue(
        self, call: InferenceCall, record: VersionRecord, streaming: bool
    ) -> PendingJob | None:
        """The admitted job; None when the version was gone (the registry view was stale)."""
        if call.admit is not None:
            call.admit(record)
        step = self._sequence_step(call, record)
        headers = (
            call.headers if step is None else {**(call.headers or {}), **self._sequence_headers.of(step)}
        )
        model, version = record.model_name, record.version
        job_id = new_job_id()
        structlog.contextvars.bind_contextvars(request_id=job_id, model=model, version=version)
        timeout_s = effective_timeout_s(call.timeout_s, self._default_timeout_s, record.response_timeout_s)
        now_ms = self._clock_ms()
        encoded = encode_job_with_request(
            build_job(
                job_id=job_id,
                protocol=call.protocol,
                model=model,
                version=version,
                reply_to=self._reply_to,
                request=b"",
                now_ms=now_ms,
                timeout_s=timeout_s,
                streaming=streaming and not call.stream_in_batch,
                # A unary call reads only the final reply (UnaryWaiter): chunks would be wasted.
                final_only=not streaming,
                headers=headers,
                sequence=step,
                trace=self._trace_context() if self._trace_context is not None else ("", ""),
                shm_inputs=call.shm_inputs,
                shm_outputs=call.shm_outputs,
            ),
            call.request,
        )
        waiter = (
            self._replies.expect_stream(job_id, self._stream_buffer_replies)
            if streaming
            else self._replies.expect(job_id)
        )
        job_class = StreamJob if streaming else UnaryJob
        pending = job_class(
            self._release,
            waiter,
            model=model,
            version=version,
            job_id=job_id,
            deadline_ms=now_ms + int(timeout_s * 1000),
            requested_version=call.version,
            enqueued_unix_ms=now_ms,
            on_chunk=self._on_chunk if streaming else None,
        )
        loop = asyncio.get_running_loop()
        expires_at = loop.time() + timeout_s
        try:
            if step is not None and record.stateful:
                admission = await self._admission.enqueue_sequence(record, encoded, step)
            else:
                admission = await self._admission.enqueue(model, version, encoded)
        except BrokerUnavailable as exc:
            self._replies.forget(job_id)
            self._count_request(model, call.version)
            raise SluiceError(ErrorCode.UNAVAILABLE, UNAVAILABLE_MESSAGE) from exc
        except BaseException:
            # Cancelled (or failed) mid-enqueue: the job may be queued, so flag it as well.
            self._release(pending, True)
            raise
        if admission is not _ADMITTED and admission is not Admission.ADMITTED_COLD:
            self._replies.forget(job_id)
            if admission is Admission.VERSION_GONE:
                return None
            self._count_request(model, call.version)
            raise _refused(call, admission, model, step)
        pending.cold = admission is Admission.ADMITTED_COLD
        self._count_request(model, call.version)
        if step is not None and record.stateful:
            pending.sequence_id = step.sequence_id
        pending.arm(loop, expires_at)
        return pending

    @staticmethod
    def _sequence_step(call: InferenceCall, record: VersionRecord) -> SequenceStep | None:
        """The call's sequence; a stateful model's call that names none gets a new one or an error."""
        if call.sequence is not None:
            return checked(call.sequence)
        if not record.stateful:
            return None
        if call.missing_sequence is None:
            return new_sequence()
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, call.missing_sequence)

    def _count_request(self, model: str, requested_version: str) -> None:
        """Every request for a version that exists counts, whether the queue took it or not."""
        if self._observer is not None:
            self._observer.admitted(model, requested_version)


def _refused(call: InferenceCall, admission: Admission, model: str, step: SequenceStep | None) -> SluiceError:
    """What a job the broker did not take is told."""
    if admission in SEQUENCE_REFUSALS and step is not None:
        return refusal(call.protocol, admission, model, step.sequence_id)
    code = ErrorCode.NO_WORKER if admission is Admission.NO_WORKER else ErrorCode.QUEUE_FULL
    return SluiceError(code, no_worker_message(model))
