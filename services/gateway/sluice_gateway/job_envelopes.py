"""Pure pieces of the data plane: building a Job envelope, turning a failure Reply into a domain error,
and how long a call may wait."""

import uuid
from collections.abc import Mapping, Sequence

from sluice.envelope import Job, Reply, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.v1.job_pb2 import SharedMemorySpan

from sluice_gateway.broker.seam import SequenceStep


def new_job_id() -> str:
    return uuid.uuid4().hex


def build_job(
    *,
    job_id: str,
    protocol: "WireProtocol.ValueType",
    model: str,
    version: str,
    reply_to: str,
    request: bytes,
    now_ms: int,
    timeout_s: float,
    streaming: bool = False,
    final_only: bool = False,
    headers: Mapping[str, str] | None = None,
    sequence: SequenceStep | None = None,
    trace: tuple[str, str] = ("", ""),
    shm_inputs: Sequence[SharedMemorySpan] = (),
    shm_outputs: Sequence[SharedMemorySpan] = (),
) -> Job:
    """The Job for one request; its deadline is ``now_ms + timeout_s``.

    ``final_only``: the client takes exactly one answer (a unary call), so a model that answers in
    chunks has the worker join them into its final reply instead of sending chunks nobody reads.
    ``trace``: the ``traceparent`` and ``tracestate`` of the gateway's span (tracing on).
    ``shm_inputs`` / ``shm_outputs``: the spans of the KServe v2 tensors in shared memory."""
    job = Job(
        job_id=job_id,
        protocol=protocol,
        model_name=model,
        model_version=version,
        reply_to=reply_to,
        deadline_unix_ms=now_ms + int(timeout_s * 1000),
        streaming=streaming,
        final_only=final_only,
        request=request,
        enqueued_unix_ms=now_ms,
        traceparent=trace[0],
        tracestate=trace[1],
    )
    if headers:
        job.headers.update(headers)
    if shm_inputs or shm_outputs:
        job.shm_inputs.extend(shm_inputs)
        job.shm_outputs.extend(shm_outputs)
    if sequence is not None:
        job.sequence_id = sequence.sequence_id
        job.sequence_start = bool(sequence.start)
        job.sequence_end = sequence.end
    return job


def failure_from_reply(reply: Reply) -> SluiceError:
    """The domain error a failure reply (``error_code`` set) stands for.

    An unknown code (a newer worker) is treated as a handler failure with the reply's status."""
    try:
        code = ErrorCode[reply.error_code]
    except KeyError:
        code = ErrorCode.HANDLER_FAILED
    status = reply.status_code if reply.status_code else None
    message = reply.message or "Prediction failed"
    return SluiceError(code, message, status)


def effective_timeout_s(client_remaining_s: float | None, default_s: float | None, version_s: float) -> float:
    """How long a call may wait: the client's deadline, else the configured default, else the
    version's response timeout."""
    if client_remaining_s is not None:
        return max(client_remaining_s, 0.0)
    if default_s is not None:
        return default_s
    return version_s
