"""Sluice's own management rpcs (``sluice.v1.SluiceManagementService``), beside TorchServe's on the
management port: what TorchServe's API has no call for. Errors map as TorchServe's rpcs' do."""

from typing import Any

import grpc
from sluice.transport.grpc_errors import add_service
from sluice.v1 import sluice_management_pb2 as pb

from sluice_manager.api.grpc_api.errors import MANAGEMENT_STATUS
from sluice_manager.api.management import ManagementService

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["SluiceManagementService"].full_name
Context = grpc.aio.ServicerContext[Any, Any]


class SluiceManagementServicer:
    def __init__(self, service: ManagementService) -> None:
        self._service = service

    async def set_version_weights(
        self, request: pb.SetVersionWeightsRequest, context: Context
    ) -> pb.SetVersionWeightsResponse:
        status = await self._service.set_weights(request.model_name, dict(request.weights))
        return pb.SetVersionWeightsResponse(msg=status.message)


def add_to_server(server: Any, servicer: SluiceManagementServicer) -> None:
    handlers = {
        "SetVersionWeights": grpc.unary_unary_rpc_method_handler(
            servicer.set_version_weights,
            request_deserializer=pb.SetVersionWeightsRequest.FromString,
            response_serializer=pb.SetVersionWeightsResponse.SerializeToString,
        )
    }
    add_service(server, [SERVICE_NAME], handlers, MANAGEMENT_STATUS)
