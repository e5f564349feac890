"""TorchServe gRPC jobs (Predictions, StreamPredictions, StreamPredictions2): ``Job.request`` is the
client's PredictionsRequest; each input reaches the handler as ``bytearray`` with an empty content
type (no JSON or text decoding, as TorchServe does); a result is sent as a PredictionResponse."""

from google.protobuf.message import DecodeError
from sluice.envelope import Job
from sluice.errors import ErrorCode, SluiceError
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest

from sluice_worker.protocols.base import TsParameter


class TorchServeGrpc:
    def row(self, job: Job) -> tuple[list[TsParameter], dict[str, str]]:
        request = PredictionsRequest()
        try:
            request.ParseFromString(job.request)
        except DecodeError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid PredictionsRequest.") from exc
        parameters: list[TsParameter] = [
            {"name": key, "contentType": "", "value": bytearray(value)}
            for key, value in request.input.items()
        ]
        return parameters, {}

    def payload(self, job: Job, body: bytes) -> bytes:
        return PredictionResponse(prediction=body).SerializeToString()

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        return b"".join(bodies)
