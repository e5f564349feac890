"""Triton's generate extension, pure conversions: the JSON request as a ModelInferRequest (declared and
undeclared models), the ModelInferResponse as the JSON object, server-sent events."""

import struct
from typing import Any

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve.generate_request import filled_shape, parse_generate_body, to_infer_request
from sluice_gateway.kserve.generate_response import generate_document, sse_event
from sluice_gateway.kserve.rest_codec import parameter_value
from sluice_gateway.kserve.rest_tensors import frame, split_bytes

UNDECLARED = ModelTensors()
LLM = ModelTensors(
    inputs=(
        TensorSpec(name="text_input", datatype="BYTES", shape=(1,)),
        TensorSpec(name="max_tokens", datatype="INT32", shape=(1,), optional=True),
        TensorSpec(name="input_ids", datatype="INT64", shape=(-1,), optional=True),
    ),
    max_batch_size=8,
)


def convert(document: dict[str, Any], tensors: ModelTensors = UNDECLARED) -> pb.ModelInferRequest:
    return to_infer_request(document, "llm", "", tensors)


def inputs(message: pb.ModelInferRequest) -> dict[str, tuple[str, list[int], bytes]]:
    return {
        t.name: (t.datatype, list(t.shape), raw)
        for t, raw in zip(message.inputs, message.raw_input_contents, strict=True)
    }


def parameters(message: pb.ModelInferRequest) -> dict[str, Any]:
    return {k: parameter_value(v) for k, v in message.parameters.items()}


def refused(document: dict[str, Any], tensors: ModelTensors = UNDECLARED) -> str:
    with pytest.raises(SluiceError) as caught:
        convert(document, tensors)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    return caught.value.message


def test_undeclared_model_text_input_and_lists_are_inputs_scalars_parameters() -> None:
    message = convert(
        {
            "id": "r1",
            "text_input": "héllo",
            "max_tokens": 16,
            "temperature": 0.5,
            "stream": True,
            "stop": "\n",
            "ids": [1, 2, 3],
            "mixed": [1, 2.5],
            "flags": [True],
            "words": ["a", "b"],
            "parameters": {"top_k": 3, "ids_too": 7},
        }
    )
    assert (message.model_name, message.model_version, message.id) == ("llm", "", "r1")
    assert inputs(message) == {
        "text_input": ("BYTES", [1], frame(["héllo".encode()])),
        "ids": ("INT64", [3], struct.pack("<3q", 1, 2, 3)),
        "mixed": ("FP64", [2], struct.pack("<2d", 1, 2.5)),
        "flags": ("BOOL", [1], b"\x01"),
        "words": ("BYTES", [2], frame([b"a", b"b"])),
    }
    assert parameters(message) == {
        "max_tokens": 16,
        "temperature": 0.5,
        "stream": True,
        "stop": "\n",
        "top_k": 3,
        "ids_too": 7,
    }


def test_undeclared_text_input_is_typed_by_its_json() -> None:
    assert inputs(convert({"text_input": ["a", "b"]}))["text_input"][:2] == ("BYTES", [2])
    assert inputs(convert({"text_input": 3}))["text_input"] == ("INT64", [1], struct.pack("<q", 3))


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"x": []}, "empty list"),
        ({"x": [1, "a"]}, "flat list"),
        ({"x": [True, 1]}, "flat list"),
        ({"x": [[1], [2]]}, "scalar or a flat list"),
        ({"text_input": None}, "flat list"),
        ({"text_input": {"a": 1}}, "flat list"),
        ({"x": None}, "must be a boolean, a number or a string"),
        ({"x": {"a": 1}}, "must be a boolean, a number or a string"),
        ({"parameters": {"x": [1]}}, "must be a boolean, a number or a string"),
    ],
)
def test_undeclared_values_of_no_clear_place_are_refused(document: dict[str, Any], fragment: str) -> None:
    assert fragment in refused(document)


def test_declared_model_keys_naming_inputs_are_inputs_and_others_parameters() -> None:
    message = convert(
        {
            "text_input": "hi",
            "input_ids": [5, 6, 7],
            "temperature": 0.2,
            "parameters": {"max_tokens": 4, "top_k": 3},
        },
        LLM,
    )
    assert inputs(message) == {
        "text_input": ("BYTES", [1, 1], frame([b"hi"])),  # behind the batch dimension
        "input_ids": ("INT64", [1, 3], struct.pack("<3q", 5, 6, 7)),
        "max_tokens": ("INT32", [1, 1], struct.pack("<i", 4)),  # named in parameters, still an input
    }
    assert parameters(message) == {"temperature": 0.2, "top_k": 3}


def test_declared_model_refusals() -> None:
    assert "must be a boolean, a number or a string" in refused({"text_input": "x", "stop": ["a"]}, LLM)
    unbatched = ModelTensors(inputs=(TensorSpec(name="text_input", datatype="BYTES", shape=(1,)),))
    assert "can not convert input 'text_input'" in refused({"text_input": ["a", "b"]}, unbatched)
    assert inputs(convert({"text_input": ["a", "b"]}, LLM))["text_input"][1] == [2, 1]  # a batch of 2
    assert "unable to parse 'data' of input 'max_tokens' as INT32" in refused({"max_tokens": "many"}, LLM)
    assert refused({"id": 7}) == "'id' must be a string"
    assert refused({"parameters": [1]}) == "'parameters' must be a JSON object"
    clash = ModelTensors(inputs=(TensorSpec(name="parameters", datatype="BYTES", shape=(1,)),))
    assert "also given as input tensor name" in refused({}, clash)


@pytest.mark.parametrize(
    ("declared", "count", "expected"),
    [
        ((-1, 1), 1, [1, 1]),
        ((-1, -1), 5, [1, 5]),
        ((-1, 2), 6, [3, 2]),
        ((2, -1, 3), 12, [2, 2, 3]),
        ((), 1, []),
        ((4,), 4, [4]),
    ],
)
def test_shapes_are_filled_as_triton_fills_them(
    declared: tuple[int, ...], count: int, expected: list[int]
) -> None:
    assert filled_shape("x", declared, count) == expected


@pytest.mark.parametrize(("declared", "count"), [((2,), 3), ((4,), 2), ((), 2), ((0,), 1)])
def test_shapes_that_cannot_hold_the_values_are_refused(declared: tuple[int, ...], count: int) -> None:
    with pytest.raises(SluiceError, match="can not convert input 'x'"):
        filled_shape("x", declared, count)


def test_body_parsing() -> None:
    assert parse_generate_body(b"") == {}
    assert parse_generate_body(b'{"text_input": "a"}') == {"text_input": "a"}
    for body, fragment in (
        (b"[1]", "must be a JSON object"),
        (b"{", "failed to parse the request JSON buffer"),
        (b'{"a": 1, "a": 2}', "'a' is given twice"),
        (b'{"parameters": {"t": 1, "t": 2}}', "'t' is given twice"),
    ):
        with pytest.raises(SluiceError) as caught:
            parse_generate_body(body)
        assert fragment in caught.value.message
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def response(*outputs: tuple[str, str, list[int], bytes], **fields: Any) -> bytes:
    message = pb.ModelInferResponse(model_name="llm", model_version="1", **fields)
    for name, datatype, shape, raw in outputs:
        message.outputs.add(name=name, datatype=datatype, shape=shape)
        message.raw_output_contents.append(raw)
    return message.SerializeToString()


def test_response_object_has_outputs_by_name_single_elements_as_scalars() -> None:
    raw = response(
        ("text_output", "BYTES", [1], frame([b"hi there"])),
        ("tokens", "INT32", [3], struct.pack("<3i", 1, 2, 3)),
        ("done", "BOOL", [1], b"\x01"),
        ("blob", "BYTES", [2], frame([b"ok", b"\xff\x00"])),
        ("model_name", "BYTES", [1], frame([b"not the model"])),
        id="r1",
        parameters={"finish_reason": pb.InferParameter(string_param="stop")},
    )
    assert generate_document(raw) == {
        "model_name": "llm",
        "model_version": "1",
        "id": "r1",
        "finish_reason": "stop",
        "text_output": "hi there",
        "tokens": [1, 2, 3],
        "done": True,
        "blob": ["ok", {"b64": "/wA="}],
    }


def test_typed_outputs_are_read_too() -> None:
    message = pb.ModelInferResponse(model_name="llm", model_version="1")
    tensor = message.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(b"typed")
    assert generate_document(message.SerializeToString())["text_output"] == "typed"
    assert split_bytes(frame([b"typed"])) == [b"typed"]


def test_an_invalid_response_is_internal() -> None:
    with pytest.raises(SluiceError) as caught:
        generate_document(b"\xff\xff")
    assert caught.value.code is ErrorCode.INTERNAL


def test_server_sent_event_framing() -> None:
    assert sse_event({"text_output": "é", "n": 1}) == b'data: {"text_output":"\\u00e9","n":1}\n\n'
