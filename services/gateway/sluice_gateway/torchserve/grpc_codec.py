"""TorchServe gRPC messages <-> the data plane. Requests are parsed only to route and validate; the
raw bytes go to the worker. Responses are the worker-built ``PredictionResponse`` bytes; fields the
gateway adds (``sequence_id``) are appended as serialized fields, which protobuf merges on parse."""

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from sluice.envelope import WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.transport.status_map import grpc_status
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.dataplane import InferenceCall
from sluice_gateway.sequences import SequenceHeaders

MODEL_NAME_REQUIRED = "Parameter model_name is required."
INVALID_REQUEST = "Invalid PredictionsRequest."

DEFAULT_NAMES = SequenceHeaders()
# Read once: a protobuf enum value read off its wrapper goes through a Python __getattr__.
TORCHSERVE_GRPC = WireProtocol.TORCHSERVE_GRPC


def parse_request(raw: bytes) -> PredictionsRequest:
    try:
        return PredictionsRequest.FromString(raw)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, INVALID_REQUEST) from exc


def to_call(
    request: PredictionsRequest, raw: bytes, timeout_s: float | None, names: SequenceHeaders = DEFAULT_NAMES
) -> InferenceCall:
    if not request.model_name:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, MODEL_NAME_REQUIRED)
    return InferenceCall(
        protocol=TORCHSERVE_GRPC,
        model=request.model_name,
        version=request.model_version,
        request=raw,
        timeout_s=timeout_s,
        sequence=sequence_step(request, names),
    )


def sequence_step(request: PredictionsRequest, names: SequenceHeaders = DEFAULT_NAMES) -> SequenceStep | None:
    """The request's sequence (its ``sequence_id``), None when it names none. Start and end are set
    only when the client marks the request so (input ``ts_request_sequence_start``/``_end`` =
    ``true``); TorchServe's frontend compares the wrong thing and marks every request as the end.
    An unmarked first request starts its sequence, as in TorchServe."""
    if not request.sequence_id:
        return None
    return SequenceStep(
        request.sequence_id,
        start=True if _marked(request, names.start) else None,
        end=_marked(request, names.end),
    )


def _marked(request: PredictionsRequest, marker: str) -> bool:
    return request.input.get(marker, b"").strip().lower() == b"true"


def sequence_suffix(sequence_id: str) -> bytes:
    """Serialized ``sequence_id`` field, appended to a worker-built response to echo the id."""
    return PredictionResponse(sequence_id=sequence_id).SerializeToString() if sequence_id else b""


def in_stream_status(error: SluiceError, code: grpc.StatusCode | None = None) -> status_pb2.Status:
    """TorchServe's in-stream error: ``google.rpc.Status`` with the gRPC code, the message and an
    ``ErrorInfo`` whose reason is the Java exception class. ``code`` overrides the mapped code."""
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=error.exception_class))
    status_code = code if code is not None else grpc_status(error)
    return status_pb2.Status(code=status_code.value[0], message=error.message, details=[info])


def error_response(error: SluiceError, sequence_id: str = "", code: grpc.StatusCode | None = None) -> bytes:
    """A StreamPredictions2 in-stream error: empty prediction, ``status`` set."""
    response = PredictionResponse(status=in_stream_status(error, code))
    if sequence_id:
        response.sequence_id = sequence_id
    return response.SerializeToString()
