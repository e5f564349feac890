"""TorchServe gRPC messages <-> the data plane. Requests are parsed only to route and validate; the
raw bytes go to the worker. Responses are the worker-built ``PredictionResponse`` bytes; fields the
gateway adds (``sequence_id``) are appended as serialized fields, which protobuf merges on parse."""

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from sluice.envelope import WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.status_map import grpc_status
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

from sluice_gateway.dataplane import InferenceCall

MODEL_NAME_REQUIRED = "Parameter model_name is required."
SEQUENCE_ID_REQUIRED = "Parameter sequenceId is required."
INVALID_REQUEST = "Invalid PredictionsRequest."

# TorchServe's default sequence header names (ts_header_key_sequence_{id,start,end}).
SEQUENCE_ID_HEADER = "ts_request_sequence_id"
SEQUENCE_START_HEADER = "ts_request_sequence_start"
SEQUENCE_END_HEADER = "ts_request_sequence_end"
# Read once: a protobuf enum value read off its wrapper goes through a Python __getattr__.
TORCHSERVE_GRPC = WireProtocol.TORCHSERVE_GRPC


def parse_request(raw: bytes) -> PredictionsRequest:
    try:
        return PredictionsRequest.FromString(raw)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, INVALID_REQUEST) from exc


def to_call(
    request: PredictionsRequest, raw: bytes, timeout_s: float | None, headers: dict[str, str] | None = None
) -> InferenceCall:
    if not request.model_name:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, MODEL_NAME_REQUIRED)
    return InferenceCall(
        protocol=TORCHSERVE_GRPC,
        model=request.model_name,
        version=request.model_version,
        request=raw,
        timeout_s=timeout_s,
        headers=headers,
    )


def sequence_headers(request: PredictionsRequest) -> dict[str, str]:
    """Handler headers of a StreamPredictions2 request. Start and end are set only when the client
    marks the request so (input ``ts_request_sequence_start``/``_end`` = ``true``); TorchServe's
    frontend compares the wrong thing and marks every request as the end."""
    headers = {SEQUENCE_ID_HEADER: request.sequence_id}
    for marker in (SEQUENCE_START_HEADER, SEQUENCE_END_HEADER):
        if request.input.get(marker, b"").strip().lower() == b"true":
            headers[marker] = "true"
    return headers


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
