"""KServe v2 ``inference.GRPCInferenceService`` (Triton's superset plus Modular MAX's ModelInferStream)
over the transport-agnostic :class:`KServeService`; also served under TorchServe's name
``org.pytorch.serve.grpc.openinference.GRPCInferenceService`` (wire-identical messages).

Registered with generic method handlers: the inference rpcs take the raw request bytes (forwarded to
the worker as ``Job.request``) and return the worker-built ModelInferResponse bytes unparsed. Rpcs not
listed here (model load/unload, CUDA shared memory, trace, log settings) answer UNIMPLEMENTED. Error
details are the bare message (no TorchServe exception class).
"""

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import grpc
from google.protobuf.message import Message
from sluice.transport.grpc_errors import Handler, StatusMapping, add_service, plain_details
from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.grpc_api import RawContext
from sluice_gateway.kserve import grpc_codec
from sluice_gateway.kserve.grpc_stream import StreamInferCall
from sluice_gateway.kserve.grpc_wire import has_outputs
from sluice_gateway.kserve.service import KServeService

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
TORCHSERVE_SERVICE_NAME = "org.pytorch.serve.grpc.openinference.GRPCInferenceService"
SERVICE_NAMES = (SERVICE_NAME, TORCHSERVE_SERVICE_NAME)
# Status details are the bare message (no TorchServe exception class).
KSERVE_STATUS = StatusMapping(details=plain_details)

# The context of the rpcs whose messages grpc (de)serializes.
Context = grpc.aio.ServicerContext[Message, Message]


class KServeInference:
    def __init__(self, service: KServeService, *, stream_max_in_flight: int) -> None:
        self._service = service
        self._stream_max_in_flight = stream_max_in_flight

    async def server_live(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._service.live())

    async def server_ready(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self._service.ready())

    async def server_metadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        return grpc_codec.server_metadata(self._service.server_metadata())

    async def model_ready(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self._service.model_ready(request.name, request.version))

    async def model_metadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        return grpc_codec.model_metadata(await self._service.model_metadata(request.name, request.version))

    async def model_config(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        return grpc_codec.model_config(await self._service.model_config(request.name, request.version))

    async def model_statistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        return grpc_codec.statistics(await self._service.statistics(request.name, request.version))

    async def repository_index(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        return grpc_codec.repository_index(await self._service.repository_index(request.ready))

    async def system_shared_memory_status(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        regions = await self._service.shared_memory.status(request.name)
        response = pb.SystemSharedMemoryStatusResponse()
        for region in regions:
            response.regions[region.name].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(
                    name=region.name, key=region.key, offset=region.offset, byte_size=region.byte_size
                )
            )
        return response

    async def system_shared_memory_register(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self._service.shared_memory.register(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    async def system_shared_memory_unregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self._service.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def model_infer(self, raw: bytes, context: RawContext) -> bytes:
        request = grpc_codec.parse_infer_request(raw)
        return await self._service.infer(request, raw, context.time_remaining())

    async def model_infer_stream(self, raw: bytes, context: RawContext) -> AsyncIterator[bytes]:
        """MAX's server-streaming rpc: the request's responses, then OK; a failure ends it with a status.
        A closing response without outputs (end marker of a decoupled request) is not sent."""
        request = grpc_codec.parse_infer_request(raw)
        stream = await self._service.open_stream(request, raw, context.time_remaining())
        sent = False
        async with aclosing(stream.replies()) as replies:
            async for reply in replies:
                if reply.final and sent and not has_outputs(reply.payload):
                    continue
                sent = True
                yield reply.payload

    async def model_stream_infer(
        self, requests: AsyncIterator[bytes], context: RawContext
    ) -> AsyncIterator[bytes]:
        call = StreamInferCall(self._service, context, max_in_flight=self._stream_max_in_flight)
        async with aclosing(call.run(requests)) as responses:
            async for response in responses:
                yield response


def _unary(method: Callable[..., Any], request_type: type[Message], response_type: type[Message]) -> Handler:
    return grpc.unary_unary_rpc_method_handler(
        method,
        request_deserializer=request_type.FromString,
        response_serializer=response_type.SerializeToString,
    )


def handlers(servicer: KServeInference) -> dict[str, Handler]:
    return {
        "ServerLive": _unary(servicer.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
        "ServerReady": _unary(servicer.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
        "ServerMetadata": _unary(
            servicer.server_metadata, pb.ServerMetadataRequest, pb.ServerMetadataResponse
        ),
        "ModelReady": _unary(servicer.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
        "ModelMetadata": _unary(servicer.model_metadata, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
        "ModelConfig": _unary(servicer.model_config, pb.ModelConfigRequest, pb.ModelConfigResponse),
        "ModelStatistics": _unary(
            servicer.model_statistics, pb.ModelStatisticsRequest, pb.ModelStatisticsResponse
        ),
        "RepositoryIndex": _unary(
            servicer.repository_index, pb.RepositoryIndexRequest, pb.RepositoryIndexResponse
        ),
        "SystemSharedMemoryStatus": _unary(
            servicer.system_shared_memory_status,
            pb.SystemSharedMemoryStatusRequest,
            pb.SystemSharedMemoryStatusResponse,
        ),
        "SystemSharedMemoryRegister": _unary(
            servicer.system_shared_memory_register,
            pb.SystemSharedMemoryRegisterRequest,
            pb.SystemSharedMemoryRegisterResponse,
        ),
        "SystemSharedMemoryUnregister": _unary(
            servicer.system_shared_memory_unregister,
            pb.SystemSharedMemoryUnregisterRequest,
            pb.SystemSharedMemoryUnregisterResponse,
        ),
        # Raw bytes in and out: no (de)serializer.
        "ModelInfer": grpc.unary_unary_rpc_method_handler(servicer.model_infer),
        "ModelInferStream": grpc.unary_stream_rpc_method_handler(servicer.model_infer_stream),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(servicer.model_stream_infer),
    }


def add_to_server(server: grpc.aio.Server, servicer: KServeInference) -> None:
    """Serve under the standard name and TorchServe's; rpcs not registered answer UNIMPLEMENTED."""
    add_service(server, SERVICE_NAMES, handlers(servicer), KSERVE_STATUS)
