"""Everything that depends on the API a job came in through (``Job.protocol``): how its handler row
is built and how a result body becomes a reply payload. New protocols (TorchServe REST, KServe)
add one entry to each table below.

Rows are built in TorchServe's decoded-request form, which ``ts.service.Service.predict`` turns into
the handler's ``data`` list and the per-row request headers (see docs/design.md, "Contracts").
"""

from collections.abc import Callable
from typing import Any, TypedDict

from google.protobuf.message import DecodeError
from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

from sluice_worker.rest_request import rest_parameters
from sluice_worker.v2_protocol import V2Protocol

NO_TENSORS = ModelTensors()
# Plain ints: reading a protobuf enum's value off its wrapper goes through a Python __getattr__, and
# these comparisons run for every job.
KSERVE = int(WireProtocol.KSERVE)
TORCHSERVE_REST = int(WireProtocol.TORCHSERVE_REST)


class TsParameter(TypedDict):
    name: str
    contentType: str
    # bytearray for TorchServe gRPC; a dict (JSON body) or arrays for KServe v2.
    value: Any


class TsHeader(TypedDict):
    name: bytes
    value: bytes


class TsRequest(TypedDict):
    """One request of a batch, as TorchServe's worker decodes it off its socket."""

    requestId: bytes
    parameters: list[TsParameter]
    headers: list[TsHeader]


def _torchserve_grpc_parameters(job: Job) -> list[TsParameter]:
    request = PredictionsRequest()
    try:
        request.ParseFromString(job.request)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid PredictionsRequest.") from exc
    # gRPC inputs reach the handler as bytearray with an empty content type (no JSON/text decoding).
    return [
        {"name": key, "contentType": "", "value": bytearray(value)} for key, value in request.input.items()
    ]


def _no_parameters(job: Job) -> list[TsParameter]:
    return []


def _prediction_response(body: bytes) -> bytes:
    return PredictionResponse(prediction=body).SerializeToString()


def _raw(body: bytes) -> bytes:
    return body


_PARAMETERS: dict[WireProtocol.ValueType, Callable[[Job], list[TsParameter]]] = {
    WireProtocol.TORCHSERVE_GRPC: _torchserve_grpc_parameters,
    # TorchServe's describe request: no inputs, header describe=True (BaseHandler.describe_handle).
    WireProtocol.DESCRIBE: _no_parameters,
}

_EXTRA_HEADERS: dict[WireProtocol.ValueType, dict[str, str]] = {
    WireProtocol.DESCRIBE: {"describe": "True"},
}

_PAYLOAD: dict[WireProtocol.ValueType, Callable[[bytes], bytes]] = {
    WireProtocol.TORCHSERVE_GRPC: _prediction_response,
    # TorchServe REST: the body as the handler serialized it.
    WireProtocol.TORCHSERVE_REST: _raw,
    WireProtocol.DESCRIBE: _raw,
}


def handler_request(
    job: Job, tensors: ModelTensors = NO_TENSORS, *, decode_input_request: bool = True
) -> TsRequest:
    """The TorchServe request for ``job`` (request id = job id), or the client error it deserves.
    ``tensors``: the model's KServe v2 declaration (rows of v2 jobs depend on it).
    ``decode_input_request``: TorchServe's setting (REST JSON/text bodies reach the handler decoded)."""
    if job.protocol == KSERVE:
        parameters, extra_headers = V2Protocol(tensors).row(job)
    elif job.protocol == TORCHSERVE_REST:
        parameters, extra_headers = list(rest_parameters(job, decode=decode_input_request)), {}
    else:
        build = _PARAMETERS.get(job.protocol)
        if build is None:
            raise SluiceError(
                ErrorCode.INTERNAL, f"This worker does not serve {_protocol_name(job.protocol)} jobs."
            )
        parameters, extra_headers = build(job), _EXTRA_HEADERS.get(job.protocol, {})
    headers = {**extra_headers, **job.headers}
    return {
        "requestId": job.job_id.encode("utf-8"),
        "parameters": parameters,
        "headers": [
            {"name": key.encode("utf-8"), "value": value.encode("utf-8")} for key, value in headers.items()
        ],
    }


def _protocol_name(value: WireProtocol.ValueType) -> str:
    try:
        return WireProtocol.Name(value)
    except ValueError:
        return f"protocol {int(value)}"


def reply_payload(job: Job, body: bytes, tensors: ModelTensors = NO_TENSORS) -> bytes:
    """What the gateway sends the client for one result body of ``job``; raises SluiceError when the
    body cannot be one (a v2 result that is neither v2 JSON nor tensors)."""
    if job.protocol == KSERVE:
        return V2Protocol(tensors).payload(job, body)
    return _PAYLOAD[job.protocol](body)
