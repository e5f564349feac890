"""TorchServe's ``InferenceAPIsService`` (wire-compatible with TorchServe 0.12) over the data plane.

Registered with generic method handlers: Predictions and the streaming methods take the raw request
bytes and return the worker-built response bytes unchanged (no serializer on either side).
"""

from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc
from google.protobuf.empty_pb2 import Empty
from sluice.errors import ErrorCode, SluiceError
from sluice.transport.grpc_errors import StatusMapping, add_service
from sluice.v1 import torchserve_inference_pb2
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, TorchServeHealthResponse

from sluice_gateway.dataplane import DataPlane
from sluice_gateway.grpc_api import RawContext
from sluice_gateway.health import ModelHealth, health_text
from sluice_gateway.sequences import SequenceHeaders
from sluice_gateway.torchserve.grpc_codec import DEFAULT_NAMES, parse_request, to_call
from sluice_gateway.torchserve.grpc_stream2 import Stream2Call
from sluice_gateway.workflows.executor import workflow_call
from sluice_gateway.workflows.service import Workflows

SERVICE_NAME: str = torchserve_inference_pb2.DESCRIPTOR.services_by_name["InferenceAPIsService"].full_name

# Status details in TorchServe's form: "<message>\n<java exception class>".
TORCHSERVE_STATUS = StatusMapping()


class TorchServeInference:
    def __init__(
        self,
        plane: DataPlane,
        model_health: ModelHealth,
        workflows: Workflows,
        *,
        stream2_max_in_flight: int,
        max_request_size: int | None = None,
        sequence_headers: SequenceHeaders = DEFAULT_NAMES,
    ) -> None:
        self._plane = plane
        # Names of the inputs that mark a request as its sequence's start or end.
        self._names = sequence_headers
        self._model_health = model_health
        self._workflows = workflows
        self._stream2_max_in_flight = stream2_max_in_flight
        # The port's gRPC limit may be higher (KServe v2 requests); TorchServe's rpcs keep theirs.
        self._max_request_size = max_request_size

    def _check_size(self, raw: bytes) -> bytes:
        if self._max_request_size is not None and len(raw) > self._max_request_size:
            raise SluiceError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"Received message larger than max ({len(raw)} vs. {self._max_request_size})",
            )
        return raw

    async def _checked(self, requests: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for raw in requests:
            yield self._check_size(raw)

    async def ping(
        self, request: Empty, context: grpc.aio.ServicerContext[Empty, TorchServeHealthResponse]
    ) -> TorchServeHealthResponse:
        return TorchServeHealthResponse(health=health_text(await self._model_health.healthy()))

    async def predictions(self, raw: bytes, context: RawContext) -> bytes:
        request = parse_request(self._check_size(raw))
        call = to_call(request, raw, context.time_remaining(), self._names)
        try:
            reply = await self._plane.infer(call)
        except SluiceError as error:
            workflow = await self._workflows.instead_of_model(error, request.model_name)
            answer = await self._workflows.answer(
                workflow_call(workflow, list(request.input.items()), context.time_remaining())
            )
            return PredictionResponse(prediction=answer).SerializeToString()
        return reply.payload

    async def stream_predictions(self, raw: bytes, context: RawContext) -> AsyncIterator[bytes]:
        request = parse_request(self._check_size(raw))
        call = to_call(request, raw, context.time_remaining(), self._names)
        try:
            job = await self._plane.submit_stream(call)
        except SluiceError as error:
            workflow = await self._workflows.instead_of_model(error, request.model_name)
            chunks = self._workflows.chunks(
                workflow_call(workflow, list(request.input.items()), context.time_remaining())
            )
            async with aclosing(chunks):
                async for chunk in chunks:
                    yield PredictionResponse(prediction=chunk).SerializeToString()
            return
        try:
            async with aclosing(job.replies()) as replies:
                async for reply in replies:
                    yield reply.payload
        finally:
            job.close()

    async def stream_predictions2(
        self, requests: AsyncIterator[bytes], context: RawContext
    ) -> AsyncIterator[bytes]:
        session = Stream2Call(
            self._plane, context, max_in_flight=self._stream2_max_in_flight, names=self._names
        )
        async with aclosing(session.run(self._checked(requests))) as responses:
            async for response in responses:
                yield response


def add_to_server(server: grpc.aio.Server, servicer: TorchServeInference) -> None:
    handlers = {
        "Ping": grpc.unary_unary_rpc_method_handler(
            servicer.ping,
            request_deserializer=Empty.FromString,
            response_serializer=TorchServeHealthResponse.SerializeToString,
        ),
        "Predictions": grpc.unary_unary_rpc_method_handler(servicer.predictions),
        "StreamPredictions": grpc.unary_stream_rpc_method_handler(servicer.stream_predictions),
        "StreamPredictions2": grpc.stream_stream_rpc_method_handler(servicer.stream_predictions2),
    }
    add_service(server, [SERVICE_NAME], handlers, TORCHSERVE_STATUS)
