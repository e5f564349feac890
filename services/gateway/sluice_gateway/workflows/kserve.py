"""A workflow as a KServe v2 model of its name (Triton's ensemble): one BYTES input whose single element
is the request the root node gets (as parameter ``body``), one BYTES output holding the workflow's
answer (:mod:`.answers`). Metadata and configuration describe it as Triton describes an ensemble:
platform ``ensemble``, one version ``1`` (a request's version is not looked at, as OVMS does for
its pipelines), and a step per node naming its member model."""

import struct
from collections.abc import AsyncGenerator
from contextlib import aclosing

from google.protobuf.message import DecodeError
from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError
from sluice.registry.workflows import WorkflowRecord
from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.metadata import (
    ConfigTensor,
    EnsembleStep,
    ModelConfigView,
    ModelMetadata,
    TensorMetadata,
)
from sluice_gateway.kserve.request import KServeRequest, RequestOptions
from sluice_gateway.workflows.executor import WorkflowCall
from sluice_gateway.workflows.service import Workflows

INPUT = "INPUT0"
OUTPUT = "OUTPUT0"
VERSION = "1"
PLATFORM = "ensemble"
_LENGTH = struct.Struct("<I")


def metadata(workflow: WorkflowRecord) -> ModelMetadata:
    return ModelMetadata(
        name=workflow.name,
        versions=(VERSION,),
        platform=PLATFORM,
        inputs=(TensorMetadata(INPUT, "BYTES", (1,)),),
        outputs=(TensorMetadata(OUTPUT, "BYTES", (1,)),),
    )


def config(workflow: WorkflowRecord, *, decoupled: bool) -> ModelConfigView:
    """``decoupled``: the last node answers in chunks (a generative member), so streams carry several
    responses."""
    return ModelConfigView(
        name=workflow.name,
        platform=PLATFORM,
        backend="",
        runtime="",
        max_batch_size=0,
        inputs=(ConfigTensor(INPUT, "TYPE_STRING", (1,)),),
        outputs=(ConfigTensor(OUTPUT, "TYPE_STRING", (1,)),),
        dynamic_batching=None,
        sequence_batching=None,
        decoupled=decoupled,
        instance_count=0,
        instance_kind="KIND_CPU",
        parameters={"workflow_url": workflow.url},
        ensemble_steps=tuple(_step(workflow, node_name) for node_name in _in_order(workflow)),
    )


def _in_order(workflow: WorkflowRecord) -> list[str]:
    """Node names parents first (the spec's order among nodes that are ready together)."""
    done: list[str] = []
    while len(done) < len(workflow.nodes):
        done += [
            node.name
            for node in workflow.nodes
            if node.name not in done and all(parent in done for parent in node.parents)
        ]
    return done


def _tensor(workflow: WorkflowRecord, node_name: str) -> str:
    """The ensemble tensor a node's output is: OUTPUT0 for a single leaf, else the node's name."""
    leaves = workflow.leaves
    return OUTPUT if len(leaves) == 1 and leaves[0].name == node_name else node_name


def _step(workflow: WorkflowRecord, node_name: str) -> EnsembleStep:
    node = workflow.node(node_name)
    if not node.parents:
        inputs = {"body": INPUT}
    elif len(node.parents) == 1:
        inputs = {"body": _tensor(workflow, node.parents[0])}
    else:
        inputs = {parent: _tensor(workflow, parent) for parent in node.parents}
    return EnsembleStep(
        model_name=node.model, input_map=inputs, output_map={"output": _tensor(workflow, node_name)}
    )


def request_body(workflow: WorkflowRecord, raw: bytes) -> tuple[str, bytes]:
    """The request id and the single element of the one BYTES input a ModelInferRequest must carry."""
    try:
        message = pb.ModelInferRequest.FromString(raw)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid ModelInferRequest.") from exc
    if len(message.inputs) != 1 or message.inputs[0].datatype != "BYTES":
        raise _invalid(workflow)
    if message.raw_input_contents:
        elements = _split(workflow, message.raw_input_contents[0])
    else:
        elements = list(message.inputs[0].contents.bytes_contents)
    if len(elements) != 1:
        raise _invalid(workflow)
    return message.id, elements[0]


def response(workflow: WorkflowRecord, request_id: str, answer: bytes, *, typed: bool) -> bytes:
    """The ModelInferResponse carrying ``answer`` (raw contents, or typed ones when asked)."""
    message = pb.ModelInferResponse(
        model_name=workflow.name,
        model_version=VERSION,
        id=request_id,
        outputs=[pb.ModelInferResponse.InferOutputTensor(name=OUTPUT, datatype="BYTES", shape=[1])],
    )
    if typed:
        message.outputs[0].contents.bytes_contents.append(answer)
    else:
        message.raw_output_contents.append(_LENGTH.pack(len(answer)) + answer)
    return message.SerializeToString()


def _split(workflow: WorkflowRecord, raw: bytes) -> list[bytes]:
    elements, position = [], 0
    while position < len(raw):
        if position + _LENGTH.size > len(raw):
            raise _invalid(workflow)
        (length,) = _LENGTH.unpack_from(raw, position)
        position += _LENGTH.size
        if position + length > len(raw):
            raise _invalid(workflow)
        elements.append(raw[position : position + length])
        position += length
    return elements


def _invalid(workflow: WorkflowRecord) -> SluiceError:
    return SluiceError(
        ErrorCode.INVALID_ARGUMENT,
        f"Workflow '{workflow.name}' takes one BYTES input ({INPUT}) holding one element: the request "
        "its first node gets",
    )


class WorkflowStream:
    """One request of a streaming rpc for a workflow: a single leaf's chunks as they come, each as a
    ModelInferResponse, or the leaves' whole answer in one."""

    def __init__(
        self, workflows: Workflows, call: WorkflowCall, request: KServeRequest, options: RequestOptions
    ) -> None:
        self._workflows = workflows
        self._call = call
        self.request = request
        self.options = options
        self.decoupled = len(call.workflow.leaves) == 1

    async def replies(self) -> AsyncGenerator[Reply, None]:
        workflow = self._call.workflow
        chunks = self._workflows.chunks(self._call)
        async with aclosing(chunks):
            previous: bytes | None = None
            async for chunk in chunks:
                if previous is not None:
                    yield self._reply(workflow, previous, final=False)
                previous = chunk
            yield self._reply(workflow, previous or b"", final=True)

    def _reply(self, workflow: WorkflowRecord, chunk: bytes, *, final: bool) -> Reply:
        payload = response(workflow, self.request.request_id, chunk, typed=self.options.typed_outputs)
        return Reply(final=final, payload=payload, status_code=200)

    def close(self) -> None:
        """Nothing to release here: the workflow's jobs are cancelled when :meth:`replies` is closed
        (its readers close it), and none exists before it starts."""
