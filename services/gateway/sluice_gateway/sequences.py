"""Sequences of stateful models, as the data plane handles them (pure pieces): which sequence a call
belongs to, the handler headers that say so, and what a refused sequence job is told.

A stateful model (TorchServe's ``sequenceBatching``) runs every request of one sequence on the
worker that holds it, in order; the broker routes them (sluice_gateway.broker.enqueue_sequence.lua).
The handler sees the sequence as TorchServe shows it: headers ``ts_request_sequence_id`` /
``_start`` / ``_end`` (their names are TorchServe's ``ts_header_key_sequence_*`` settings).
"""

import uuid
from dataclasses import dataclass

from sluice.envelope import WireProtocol
from sluice.errors import ErrorCode, SluiceError, no_worker_message
from sluice.registry import names

from sluice_gateway.broker.seam import Admission, SequenceStep

# TorchServe's answer to a stateful model's request without a sequence id.
SEQUENCE_ID_REQUIRED = "Parameter sequenceId is required."
# The prefix of the ids TorchServe makes for REST requests that name no sequence.
NEW_SEQUENCE_PREFIX = "ts-seq-"
TRUE = "true"


@dataclass(frozen=True)
class SequenceHeaders:
    """The handler header names (TorchServe's ``ts_header_key_sequence_{id,start,end}``)."""

    id: str = "ts_request_sequence_id"
    start: str = "ts_request_sequence_start"
    end: str = "ts_request_sequence_end"

    def of(self, step: SequenceStep) -> dict[str, str]:
        headers = {self.id: step.sequence_id}
        if step.start:
            headers[self.start] = TRUE
        if step.end:
            headers[self.end] = TRUE
        return headers


def new_sequence() -> SequenceStep:
    """A sequence for a stateful model's REST request that names none, as TorchServe makes one."""
    return SequenceStep(f"{NEW_SEQUENCE_PREFIX}{uuid.uuid4()}", start=True)


def checked(step: SequenceStep) -> SequenceStep:
    names.check_sequence_id(step.sequence_id)
    return step


def correlation_id_required(model: str) -> str:
    """Triton's answer to a stateful model's KServe v2 request that names no sequence."""
    return f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"


def refusal(
    protocol: "WireProtocol.ValueType", admission: Admission, model: str, sequence_id: str
) -> SluiceError:
    """The error a refused sequence job gets: TorchServe's texts, or Triton's on KServe v2."""
    if protocol == WireProtocol.KSERVE and admission is not Admission.SEQUENCE_LIMIT:
        return SluiceError(
            ErrorCode.INVALID_ARGUMENT,
            f"inference request for sequence {sequence_id} to model '{model}' must specify the START flag "
            "on the first request of the sequence",
        )
    if admission is Admission.SEQUENCE_START_REQUIRED:
        return SluiceError(ErrorCode.INVALID_ARGUMENT, f"Sequence {sequence_id} is not started.")
    # Closed (ended, idle, timed out) or over a limit: TorchServe's one message for all of them.
    return SluiceError(ErrorCode.NO_WORKER, no_worker_message(model))
