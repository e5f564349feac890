"""TorchServe gRPC jobs (Predictions, StreamPredictions, StreamPredictions2): the job's request is the
client's PredictionsRequest; each input reaches the handler as ``bytearray`` with an empty content
type (no JSON or text decoding, as TorchServe does); a result is sent as a PredictionResponse.

A large request's inputs are read off the wire format directly (:mod:`sluice.wire`): an input of
megabytes is copied once, into its ``bytearray``, instead of once more for every message it would be
parsed into. Below ``LARGE_JOB_BYTES`` upb's C parser is cheaper than the Python scanner.
"""

from google.protobuf.message import DecodeError
from sluice import wire
from sluice.envelope import LARGE_JOB_BYTES, Job
from sluice.errors import ErrorCode, SluiceError
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

from sluice_worker.protocols.base import TsParameter

INVALID = "Invalid PredictionsRequest."
_INPUT_FIELD = PredictionsRequest.DESCRIPTOR.fields_by_name["input"].number
_KEY, _VALUE = 1, 2


def inputs(request: bytes | memoryview) -> dict[str, memoryview | bytes]:
    """The request's ``input`` map, values as views into ``request`` (a later entry of a key wins, as
    protobuf parses a map)."""
    found: dict[str, memoryview | bytes] = {}
    try:
        for number, wire_type, entry, _start, _end in wire.fields(memoryview(request)):
            if number != _INPUT_FIELD or wire_type != wire.LENGTH_DELIMITED:
                continue
            assert isinstance(entry, memoryview)
            key, value = "", memoryview(b"")
            for field, kind, part, _s, _e in wire.fields(entry):
                if kind == wire.LENGTH_DELIMITED and isinstance(part, memoryview):
                    if field == _KEY:
                        key = str(part, "utf-8")
                    elif field == _VALUE:
                        value = part
            found[key] = value
    except (wire.WireError, UnicodeDecodeError) as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, INVALID) from exc
    return found


def _parsed_inputs(request: bytes | memoryview) -> dict[str, bytes]:
    try:
        return dict(PredictionsRequest.FromString(bytes(request)).input)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, INVALID) from exc


class TorchServeGrpc:
    def row(self, job: Job, request: bytes | memoryview) -> tuple[list[TsParameter], dict[str, str]]:
        read = inputs if len(request) >= LARGE_JOB_BYTES else _parsed_inputs
        parameters: list[TsParameter] = [
            {"name": key, "contentType": "", "value": bytearray(value)}
            for key, value in read(request).items()
        ]
        return parameters, {}

    def payload(self, job: Job, body: bytes) -> bytes:
        return PredictionResponse(prediction=body).SerializeToString()

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        return b"".join(bodies)
