"""Workflow node jobs (``WireProtocol.WORKFLOW_NODE``): ``Job.request`` is a NodeInput, whose
parameters reach the handler as TorchServe's workflow executor hands them to a node: a parent's output
(or a gRPC / KServe v2 call's input, for a root) as ``bytearray`` with no content type. A parameter
that names a content type is decoded as a TorchServe REST body would be (the wire allows it; the
gateway sends none today). Results are sent raw, as the handler serialized them."""

from google.protobuf.message import DecodeError
from sluice.envelope import Job
from sluice.errors import ErrorCode, SluiceError
from sluice.v1.job_pb2 import NodeInput

from sluice_worker.protocols.base import TsParameter
from sluice_worker.protocols.torchserve_rest import decode_value


class WorkflowNode:
    def __init__(self, *, decode: bool) -> None:
        self._decode = decode

    def row(self, job: Job, request: bytes | memoryview) -> tuple[list[TsParameter], dict[str, str]]:
        node_input = NodeInput()
        try:
            node_input.ParseFromString(bytes(request))
        except DecodeError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid workflow node input.") from exc
        parameters: list[TsParameter] = [
            {
                "name": parameter.name,
                "contentType": parameter.content_type,
                "value": decode_value(parameter.content_type, parameter.value, decode=self._decode),
            }
            for parameter in node_input.parameters
        ]
        return parameters, {}

    def payload(self, job: Job, body: bytes) -> bytes:
        return body

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        return b"".join(bodies)
