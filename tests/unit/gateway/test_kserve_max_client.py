"""Modular MAX's KServe gRPC client against the KServe service (in-memory broker, fake registry): its
``model_version "0"`` names the default version unless the model has a version "0", and its prompt,
typed ``int_contents`` without datatype or shape, reaches the worker as an INT32 [n] input with typed
answers asked for. Requests that follow the v2 protocol go through untouched."""

import asyncio

import pytest
from sluice.envelope import Job
from sluice.errors import ErrorCode, SluiceError
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.dataplane import DataPlane
from sluice_gateway.kserve import max_form
from sluice_gateway.kserve.grpc_codec import parse_infer_request, to_kserve_request
from sluice_gateway.kserve.service import KServeService
from sluice_gateway.kserve.shared_memory import SharedMemory
from sluice_gateway.registry_cache import RegistryCache
from sluice_gateway.workflows.service import Workflows

from tests.unit.gateway.fakes import FakeClusterReader, InMemoryRegions, record
from tests.unit.gateway.in_memory_broker import InMemoryBroker

Input = pb.ModelInferRequest.InferInputTensor
PROMPT = [ord(c) for c in "What is life?"]


def max_request(version: str = "0", **parameters: pb.InferParameter) -> pb.ModelInferRequest:
    """What MAX's example client sends: the prompt's code points as int_contents, nothing else."""
    return pb.ModelInferRequest(
        model_name="llm",
        model_version=version,
        inputs=[Input(name="prompt", contents=pb.InferTensorContents(int_contents=PROMPT))],
        parameters={"max_tokens": pb.InferParameter(string_param="500"), **parameters},
    )


class Served:
    def __init__(self, *versions: str, default: str = "1.0") -> None:
        self.reader = FakeClusterReader()
        self.broker = InMemoryBroker()
        for version in versions:
            self.reader.put(record("llm", version), default=version == default)
            self.broker.admission.add_version("llm", version)
        resolver = RegistryCache(self.reader, ttl_s=5.0)
        plane = DataPlane(resolver, self.broker.admission, self.broker.replies)
        self.service = KServeService(
            plane,
            resolver,
            self.reader,
            Workflows(plane, resolver),
            gateway_ready=self._ready,
            version="test",
            shared_memory=SharedMemory(InMemoryRegions(), enabled=False),
        )

    @staticmethod
    async def _ready() -> bool:
        return True

    async def infer(self, request: pb.ModelInferRequest, version: str) -> Job:
        """The job a ModelInfer call queues on ``version`` (answered, so that the call ends)."""
        raw = request.SerializeToString()
        call = asyncio.ensure_future(self.service.infer(parse_infer_request(raw), raw, None))
        job = await self.broker.admission.take("llm", version)
        self.broker.replies.send(job.job_id, final=True, status_code=200, payload=b"answer")
        assert await call == b"answer"
        return job

    async def stream_job(self, request: pb.ModelInferRequest, version: str) -> Job:
        raw = request.SerializeToString()
        stream = await self.service.open_stream(parse_infer_request(raw), raw, None)
        job = await self.broker.admission.take("llm", version)
        stream.close()
        return job


async def test_version_0_is_the_default_version_when_none_is_called_0() -> None:
    served = Served("1.0", "2.0", default="2.0")
    assert (await served.service.record("llm", "0")).version == "2.0"
    assert list((await served.service.model_metadata("llm", "0")).versions) == ["1.0", "2.0"]
    assert (await served.infer(max_request(), "2.0")).model_version == "2.0"
    assert (await served.stream_job(max_request(), "2.0")).model_version == "2.0"
    # Other versions are as named; an unknown one is still NOT_FOUND.
    assert (await served.service.record("llm", "1.0")).version == "1.0"
    with pytest.raises(SluiceError) as info:
        await served.service.record("llm", "00")
    assert (info.value.code, info.value.message) == (
        ErrorCode.VERSION_NOT_FOUND,
        "Model version: 00 does not exist for model: llm",
    )


async def test_a_version_called_0_is_served_as_named() -> None:
    served = Served("0", "1.0", default="1.0")
    assert (await served.service.record("llm", "0")).version == "0"
    assert (await served.infer(max_request(), "0")).model_version == "0"


async def test_version_0_of_an_unknown_model_is_not_found() -> None:
    served = Served("1.0")
    with pytest.raises(SluiceError) as info:
        await served.service.record("nope", "0")
    assert (info.value.code, info.value.message) == (ErrorCode.MODEL_NOT_FOUND, "Model not found: nope")


async def test_the_prompt_reaches_the_worker_typed_and_shaped_with_typed_answers_asked() -> None:
    served = Served("1.0")
    job = await served.infer(max_request(), "1.0")
    sent = pb.ModelInferRequest.FromString(job.request)
    [prompt] = sent.inputs
    assert (prompt.name, prompt.datatype, list(prompt.shape)) == ("prompt", "INT32", [len(PROMPT)])
    assert list(prompt.contents.int_contents) == PROMPT
    assert sent.parameters["binary_data_output"].WhichOneof("parameter_choice") == "bool_param"
    assert sent.parameters["binary_data_output"].bool_param is False
    assert sent.parameters["max_tokens"].string_param == "500"


def test_v2_requests_and_a_stated_binary_data_output_are_left_as_sent() -> None:
    typed = pb.ModelInferRequest(
        model_name="llm",
        inputs=[
            Input(
                name="prompt",
                datatype="INT32",
                shape=[len(PROMPT)],
                contents=pb.InferTensorContents(int_contents=PROMPT),
            )
        ],
    )
    raw = typed.SerializeToString()
    request = to_kserve_request(typed)
    assert max_form.complete(request, raw) == (request, raw)
    # Raw data and an input with a shape but no datatype are not MAX's form: validation refuses them.
    raw_input = pb.ModelInferRequest(inputs=[Input(name="x", shape=[1])], raw_input_contents=[b"\0" * 4])
    assert max_form.complete(to_kserve_request(raw_input), b"r") == (to_kserve_request(raw_input), b"r")
    # A MAX request that asks for raw answers keeps its choice; every contents field implies a type.
    binary = max_request(binary_data_output=pb.InferParameter(bool_param=True))
    completed, sent = max_form.complete(to_kserve_request(binary), binary.SerializeToString())
    assert pb.ModelInferRequest.FromString(sent).parameters["binary_data_output"].bool_param is True
    assert completed.inputs[0].datatype == "INT32"
    for field, datatype in max_form.IMPLIED_DATATYPES.items():
        contents = pb.InferTensorContents()
        value: object = {"bool_contents": True, "bytes_contents": b"x"}.get(field, 1)
        getattr(contents, field).extend([value, value])
        message = pb.ModelInferRequest(inputs=[Input(name="x", contents=contents)])
        completed, _ = max_form.complete(to_kserve_request(message), message.SerializeToString())
        assert (completed.inputs[0].datatype, completed.inputs[0].shape) == (datatype, (2,))
