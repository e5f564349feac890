"""TorchServe's ``ManagementAPIsService`` (wire-compatible with TorchServe 0.12's management.proto).

Each method converts its request with TorchServe's gRPC defaults (proto3 zero values mean "unset":
ints <= 0 fall back to the server's defaults, ``min_worker`` <= 0 is 1, ``synchronous`` is false),
awaits one :class:`ManagementService` call and returns ``ManagementResponse{msg}``: the status text,
or the pretty-printed JSON of List/Describe.
"""

from typing import Any

import grpc
from sluice.errors import ErrorCode, SluiceError
from sluice.transport.grpc_errors import add_service
from sluice.v1 import torchserve_management_pb2 as pb

from sluice_manager.api.grpc_api.errors import MANAGEMENT_STATUS
from sluice_manager.api.management import ManagementService
from sluice_manager.api.management_calls import RegisterRequest, ScaleRequest
from sluice_manager.api.model_api import require_model_api
from sluice_manager.api.model_views import pretty

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["ManagementAPIsService"].full_name
MODEL_NAME_REQUIRED = "Parameter model_name is required."

Context = Any  # grpc.aio.ServicerContext


def _positive(value: int) -> int | None:
    return value if value > 0 else None


def _text(value: str) -> str | None:
    return value or None


def register_request(request: pb.RegisterModelRequest) -> RegisterRequest:
    return RegisterRequest(
        url=request.url,
        model_name=_text(request.model_name),
        handler=_text(request.handler),
        runtime=_text(request.runtime),
        batch_size=_positive(request.batch_size),
        max_batch_delay_ms=_positive(request.max_batch_delay),
        initial_workers=_positive(request.initial_workers),
        synchronous=request.synchronous,
        response_timeout_s=_positive(request.response_timeout),
        startup_timeout_s=_positive(request.startup_timeout),
    )


def scale_request(request: pb.ScaleWorkerRequest) -> ScaleRequest:
    low = request.min_worker if request.min_worker > 0 else 1
    high = request.max_worker if request.max_worker > 0 else low
    return ScaleRequest(
        model_name=request.model_name,
        version=_text(request.model_version),
        min_workers=low,
        max_workers=high,
        synchronous=request.synchronous,
        # 0 is proto3's "unset" here, as for every int of these messages: the default stop timeout
        # (an immediate stop needs REST's timeout=0); -1 is the default too.
        stop_timeout_s=None if request.timeout in (0, -1) else request.timeout,
        number_gpu=request.number_gpu,
    )


class ManagementServicer:
    def __init__(self, service: ManagementService) -> None:
        self._service = service

    async def register_model(
        self, request: pb.RegisterModelRequest, context: Context
    ) -> pb.ManagementResponse:
        status = await self._service.register(register_request(request))
        return pb.ManagementResponse(msg=status.message)

    async def unregister_model(
        self, request: pb.UnregisterModelRequest, context: Context
    ) -> pb.ManagementResponse:
        # The model-API switch comes before any validation, as in TorchServe.
        require_model_api(self._service.config.model_api_enabled)
        if not request.model_name:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, MODEL_NAME_REQUIRED)
        status = await self._service.unregister(request.model_name, _text(request.model_version))
        return pb.ManagementResponse(msg=status.message)

    async def scale_worker(self, request: pb.ScaleWorkerRequest, context: Context) -> pb.ManagementResponse:
        status = await self._service.scale(scale_request(request))
        return pb.ManagementResponse(msg=status.message)

    async def set_default(self, request: pb.SetDefaultRequest, context: Context) -> pb.ManagementResponse:
        status = await self._service.set_default(request.model_name, request.model_version)
        return pb.ManagementResponse(msg=status.message)

    async def list_models(self, request: pb.ListModelsRequest, context: Context) -> pb.ManagementResponse:
        listing = await self._service.list_models(request.limit, request.next_page_token)
        return pb.ManagementResponse(msg=pretty(listing))

    async def describe_model(
        self, request: pb.DescribeModelRequest, context: Context
    ) -> pb.ManagementResponse:
        entries = await self._service.describe(
            request.model_name, _text(request.model_version), customized=request.customized
        )
        return pb.ManagementResponse(msg=pretty(entries))


def add_to_server(server: Any, servicer: ManagementServicer) -> None:
    methods: dict[str, tuple[Any, Any]] = {
        "RegisterModel": (servicer.register_model, pb.RegisterModelRequest),
        "UnregisterModel": (servicer.unregister_model, pb.UnregisterModelRequest),
        "ScaleWorker": (servicer.scale_worker, pb.ScaleWorkerRequest),
        "SetDefault": (servicer.set_default, pb.SetDefaultRequest),
        "ListModels": (servicer.list_models, pb.ListModelsRequest),
        "DescribeModel": (servicer.describe_model, pb.DescribeModelRequest),
    }
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=message.FromString,
            response_serializer=pb.ManagementResponse.SerializeToString,
        )
        for name, (method, message) in methods.items()
    }
    add_service(server, [SERVICE_NAME], handlers, MANAGEMENT_STATUS)
