"""A workflow as a KServe v2 model: its one BYTES input and output, and its ensemble description."""

import struct

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.registry.workflows import WorkflowNode, WorkflowRecord
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve.grpc_codec import model_config
from sluice_gateway.workflows import kserve

WORKFLOW = WorkflowRecord(
    name="pipe",
    url="pipe.war",
    nodes=[
        WorkflowNode(name="pre", model="pipe__pre", children=["cnn"]),
        WorkflowNode(name="cnn", model="pipe__cnn", parents=["pre"], children=["post"]),
        WorkflowNode(name="post", model="pipe__post", parents=["cnn"]),
    ],
)


def framed(*elements: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def request(raw: bytes) -> bytes:
    tensor = pb.ModelInferRequest.InferInputTensor(name=kserve.INPUT, datatype="BYTES", shape=[1])
    return pb.ModelInferRequest(
        model_name="pipe", id="r1", inputs=[tensor], raw_input_contents=[raw]
    ).SerializeToString()


def test_the_one_element_comes_raw_or_typed() -> None:
    assert kserve.request_body(WORKFLOW, request(framed(b"hello"))) == ("r1", b"hello")
    typed = pb.ModelInferRequest.InferInputTensor(
        name=kserve.INPUT,
        datatype="BYTES",
        shape=[1],
        contents=pb.InferTensorContents(bytes_contents=[b"hi"]),
    )
    raw = pb.ModelInferRequest(model_name="pipe", inputs=[typed]).SerializeToString()
    assert kserve.request_body(WORKFLOW, raw) == ("", b"hi")


@pytest.mark.parametrize(
    "raw",
    [
        request(framed(b"a", b"b")),
        request(b"\x05\x00\x00\x00ab"),
        pb.ModelInferRequest(model_name="pipe").SerializeToString(),
        b"\xff\xff",
    ],
)
def test_anything_but_one_bytes_element_is_refused(raw: bytes) -> None:
    with pytest.raises(SluiceError) as refused:
        kserve.request_body(WORKFLOW, raw)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT


def test_the_answer_is_one_bytes_output() -> None:
    message = pb.ModelInferResponse.FromString(kserve.response(WORKFLOW, "r1", b"out", typed=False))
    assert (message.model_name, message.model_version, message.id) == ("pipe", "1", "r1")
    assert message.raw_output_contents == [framed(b"out")]
    typed = pb.ModelInferResponse.FromString(kserve.response(WORKFLOW, "r1", b"out", typed=True))
    assert typed.outputs[0].contents.bytes_contents == [b"out"]


def test_the_config_is_an_ensemble_of_the_members() -> None:
    config = model_config(kserve.config(WORKFLOW, decoupled=False)).config
    assert config.platform == "ensemble"
    steps = [(s.model_name, dict(s.input_map), dict(s.output_map)) for s in config.ensemble_scheduling.step]
    assert steps == [
        ("pipe__pre", {"body": "INPUT0"}, {"output": "pre"}),
        ("pipe__cnn", {"body": "pre"}, {"output": "cnn"}),
        ("pipe__post", {"body": "cnn"}, {"output": "OUTPUT0"}),
    ]
