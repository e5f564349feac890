"""The KServe v2 tensor codec: every datatype raw and typed, BYTES framing, FP16/BF16, JSON forms."""

import json
import struct
from typing import Any

import numpy as np
import pytest
import torch
from sluice.kserve.datatypes import DATATYPES
from sluice.v1 import kserve_pb2 as pb
from sluice_worker.protocols import kserve_codec
from sluice_worker.protocols.kserve_codec import CodecError, WireTensor

SAMPLES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "UINT8": np.array([[0, 1, 255], [7, 8, 9]], dtype=np.uint8),
    "UINT16": np.array([[0, 1, 65535], [7, 8, 9]], dtype=np.uint16),
    "UINT32": np.array([[0, 1, 2**32 - 1], [7, 8, 9]], dtype=np.uint32),
    "UINT64": np.array([[0, 1, 2**64 - 1], [7, 8, 9]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127], [7, 8, 9]], dtype=np.int8),
    "INT16": np.array([[-32768, 0, 32767], [7, 8, 9]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1], [7, 8, 9]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1], [7, 8, 9]], dtype=np.int64),
    "FP16": np.array([[0.5, -1.0, 65504.0], [7, 8, 9]], dtype=np.float16),
    "FP32": np.array([[0.5, -1.0, 3.25], [7, 8, np.inf]], dtype=np.float32),
    "FP64": np.array([[0.5, -1.0, 1e300], [7, 8, 9]], dtype=np.float64),
    "BYTES": np.array([[b"", b"abc", b"\x00\xff"], [b"x" * 300, b"y", b"z"]], dtype=object),
    # Values exactly representable in bfloat16.
    "BF16": np.array([[0.5, -1.0, 3.0], [256.0, -0.125, 2.0**40]], dtype=np.float32),
}
TYPED = [name for name, d in DATATYPES.items() if d.contents_field is not None]


def _raw_of(datatype: str, array: np.ndarray) -> bytes:
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(e)) + e for e in array.reshape(-1))
    if datatype == "BF16":
        return (array.astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    return array.astype(kserve_codec.NUMPY_DTYPES[datatype]).tobytes()


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_raw_decode_is_little_endian_row_major(datatype: str) -> None:
    expected = SAMPLES[datatype]
    decoded = kserve_codec.from_raw(datatype, (2, 3), _raw_of(datatype, expected))
    assert decoded.shape == (2, 3)
    if datatype == "BF16":
        np.testing.assert_array_equal(decoded, expected.astype(np.float32))
    else:
        assert decoded.tolist() == expected.tolist()
    assert decoded.flags.writeable


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_raw_round_trip(datatype: str) -> None:
    raw = _raw_of(datatype, SAMPLES[datatype])
    assert kserve_codec.to_raw(kserve_codec.from_raw(datatype, (2, 3), raw), datatype) == raw


@pytest.mark.parametrize("datatype", TYPED)
def test_typed_contents_give_the_same_array_as_raw(datatype: str) -> None:
    field = DATATYPES[datatype].contents_field
    assert field is not None
    values = SAMPLES[datatype].reshape(-1).tolist()
    typed = kserve_codec.from_typed(datatype, (2, 3), pb.InferTensorContents(**{field: values}))
    raw = kserve_codec.from_raw(datatype, (2, 3), _raw_of(datatype, SAMPLES[datatype]))
    assert typed.dtype == raw.dtype
    assert typed.tolist() == raw.tolist()


def test_narrow_int_contents_keep_the_low_bytes_as_triton_does() -> None:
    typed = kserve_codec.from_typed("INT8", (2,), pb.InferTensorContents(int_contents=[257, -129]))
    assert typed.tolist() == [1, 127]


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_types_have_no_typed_form(datatype: str) -> None:
    with pytest.raises(CodecError):
        kserve_codec.from_typed(datatype, (1,), pb.InferTensorContents(fp32_contents=[1.0]))


def test_bf16_rounds_to_nearest_even_like_torch() -> None:
    values = np.array([1.00390625, 1.01171875, -3.14159, 1e-40, np.inf, 65519.0], dtype=np.float32)
    ours = kserve_codec.to_raw(values, "BF16")
    theirs = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().astype("<u2").tobytes()
    assert ours == theirs
    assert np.isnan(kserve_codec.from_raw("BF16", (1,), kserve_codec.to_raw(np.array([np.nan]), "BF16")))[0]


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_encode_infers_the_datatype_from_the_array(datatype: str) -> None:
    array = SAMPLES[datatype]
    if datatype == "BF16":
        tensor = kserve_codec.encode("y", torch.from_numpy(array).to(torch.bfloat16))
    else:
        tensor = kserve_codec.encode("y", array)
    assert tensor == WireTensor("y", datatype, (2, 3), _raw_of(datatype, array))


def test_encode_takes_torch_tensors_strings_and_the_declared_type() -> None:
    assert kserve_codec.encode("y", torch.tensor([1.5, 2.0])).datatype == "FP32"
    assert kserve_codec.encode("y", np.array(["é", "b"])).raw == _raw_of(
        "BYTES", np.array(["é".encode(), b"b"])
    )
    declared = kserve_codec.encode("y", np.array([1.0, 2.0]), "INT32")
    assert declared == WireTensor("y", "INT32", (2,), np.array([1, 2], dtype="<i4").tobytes())
    assert kserve_codec.encode("y", 3).shape == ()
    with pytest.raises(CodecError):
        kserve_codec.encode("y", np.array([1 + 2j]))
    with pytest.raises(CodecError):
        kserve_codec.encode("y", np.array([object()], dtype=object), "BYTES")


def test_tensor_sets_round_trip() -> None:
    packed = kserve_codec.tensor_result({"a": SAMPLES["FP32"], "b": SAMPLES["BYTES"]}, {"a": "FP64"})
    assert packed.startswith(kserve_codec.TENSOR_SET_MAGIC)
    a, b = kserve_codec.unpack(packed[len(kserve_codec.TENSOR_SET_MAGIC) :])
    assert a == WireTensor("a", "FP64", (2, 3), SAMPLES["FP32"].astype("<f8").tobytes())
    assert b.datatype == "BYTES"
    assert kserve_codec.from_raw("BYTES", b.shape, b.raw).tolist() == SAMPLES["BYTES"].tolist()


def test_cast_to_a_declared_type() -> None:
    tensor = kserve_codec.encode("y", np.array([1.5, -2.0], dtype=np.float64))
    assert kserve_codec.cast(tensor, "FP32").raw == np.array([1.5, -2.0], dtype="<f4").tobytes()
    assert kserve_codec.cast(tensor, "FP64") is tensor
    with pytest.raises(CodecError):
        kserve_codec.cast(tensor, "BYTES")


@pytest.mark.parametrize("typed", [False, True])
def test_response_raw_or_typed(typed: bool) -> None:
    tensors = [kserve_codec.encode(n, SAMPLES[n]) for n in TYPED]
    message = kserve_codec.response(tensors, typed=typed)
    assert [o.name for o in message.outputs] == TYPED
    if not typed:
        assert list(message.raw_output_contents) == [t.raw for t in tensors]
        assert all(not o.HasField("contents") for o in message.outputs)
        return
    assert not message.raw_output_contents
    for output in message.outputs:
        field = DATATYPES[output.datatype].contents_field
        assert field is not None
        assert list(getattr(output.contents, field)) == SAMPLES[output.datatype].reshape(-1).tolist()


def test_a_typed_response_with_half_precision_stays_raw() -> None:
    message = kserve_codec.response(
        [kserve_codec.encode("h", SAMPLES["FP16"]), kserve_codec.encode("f", SAMPLES["FP32"])], typed=True
    )
    assert len(message.raw_output_contents) == 2


def test_json_inputs_are_torchserves_oip_form() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="s", datatype="BYTES", shape=[2, 3])
    got = kserve_codec.json_input(tensor, SAMPLES["BYTES"])
    assert got["shape"] == [2, 3]
    assert got["data"] == ["", "abc", {"b64": "AP8="}, "x" * 300, "y", "z"]
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP16", shape=[2, 3])
    assert kserve_codec.json_input(tensor, SAMPLES["FP16"])["data"] == [0.5, -1.0, 65504.0, 7.0, 8.0, 9.0]


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            {"name": "y", "datatype": "FP32", "shape": [2], "data": [1, 2]},
            ("FP32", (2,), np.float32, [1.0, 2.0]),
        ),
        (
            {"name": "y", "datatype": "INT8", "shape": [2, 1], "data": [[1], [2]]},
            ("INT8", (2, 1), np.int8, [1, 2]),
        ),
        ({"name": "y", "data": [[True, False]]}, ("BOOL", (1, 2), np.bool_, [True, False])),
        ({"name": "y", "data": [1, 2, 3]}, ("INT64", (3,), np.int64, [1, 2, 3])),
        ({"name": "y", "data": [1.5, 2]}, ("FP32", (2,), np.float32, [1.5, 2.0])),
        ({"name": "y", "datatype": "BF16", "shape": [1], "data": [0.5]}, ("BF16", (1,), None, None)),
    ],
)
def test_json_outputs(output: dict[str, Any], expected: tuple[Any, ...]) -> None:
    datatype, shape, dtype, values = expected
    tensor = kserve_codec.from_json_output(output)
    assert (tensor.datatype, tensor.shape) == (datatype, shape)
    if dtype is not None:
        assert tensor.raw == np.array(values, dtype=dtype).tobytes()
    else:
        assert tensor.raw == np.array([0x3F00], dtype="<u2").tobytes()


def test_json_bytes_outputs_are_utf8_and_declared_types_win() -> None:
    tensor = kserve_codec.from_json_output(
        {"name": "t", "datatype": "BYTES", "shape": [2], "data": ["hé", ""]}
    )
    assert tensor.raw == _raw_of("BYTES", np.array(["hé".encode(), b""], dtype=object))
    tensor = kserve_codec.from_json_output(
        {"name": "y", "datatype": "FP64", "shape": [1], "data": [2]}, declared="INT16"
    )
    assert tensor == WireTensor("y", "INT16", (1,), np.array([2], dtype="<i2").tobytes())


# What a REST client can send as JSON strings, and what only gRPC or binary data can carry.
ECHOED = [b"hello", "wörld".encode(), b"\xff\x00\x80", b"", b"\x00", b"a\x00", "🙂".encode(), b"\xc3"]


def test_bytes_elements_reach_a_json_handler_as_text_or_marked_base64() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="s", datatype="BYTES", shape=[len(ECHOED)])
    data = kserve_codec.json_input(tensor, np.array(ECHOED, dtype=object))["data"]
    assert data == ["hello", "wörld", {"b64": "/wCA"}, "", "\x00", "a\x00", "🙂", {"b64": "ww=="}]


def test_a_json_handler_returning_its_bytes_input_echoes_every_element() -> None:
    array = np.array(ECHOED, dtype=object)
    tensor = pb.ModelInferRequest.InferInputTensor(name="s", datatype="BYTES", shape=[len(ECHOED)])
    seen = kserve_codec.json_input(tensor, array)
    # TorchServe serializes the handler's dict with json.dumps; the worker parses it back.
    returned = json.loads(json.dumps({**seen, "name": "out"}, indent=2))
    assert kserve_codec.from_json_output(returned).raw == _raw_of("BYTES", array)
    # Without a datatype, marked elements are BYTES too.
    untyped = {"name": "out", "data": returned["data"]}
    assert kserve_codec.from_json_output(untyped) == WireTensor("out", "BYTES", (8,), _raw_of("BYTES", array))


def test_bytes_output_elements_may_be_str_marked_base64_or_bytes() -> None:
    tensor = kserve_codec.encode("t", np.array(["é", {"b64": "/wCA"}, b"\x00"], dtype=object), "BYTES")
    assert tensor.raw == _raw_of("BYTES", np.array(["é".encode(), b"\xff\x00\x80", b"\x00"], dtype=object))


@pytest.mark.parametrize(
    "element",
    [{"b64": "not base64!"}, {"b64": 5}, {"b64": "AA==", "more": 1}, {"base64": "AA=="}, 5, None],
)
def test_bad_bytes_output_elements_are_refused(element: Any) -> None:
    with pytest.raises(CodecError):
        kserve_codec.from_json_output({"name": "t", "datatype": "BYTES", "shape": [1], "data": [element]})


def test_a_list_of_bytes_keeps_trailing_nuls() -> None:
    # np.asarray would make fixed-width |S elements, which drop trailing NULs.
    tensor = kserve_codec.encode("t", [b"a\x00", b"\xff\x00"])
    assert (tensor.datatype, tensor.raw) == (
        "BYTES",
        _raw_of("BYTES", np.array([b"a\x00", b"\xff\x00"], dtype=object)),
    )
    tensor = kserve_codec.encode("t", ["a\x00"])
    assert tensor.raw == _raw_of("BYTES", np.array([b"a\x00"], dtype=object))


@pytest.mark.parametrize(
    "output",
    [
        {"name": "y", "datatype": "FP32", "shape": [1], "data": [{"b64": "AA=="}]},
        {"name": "y", "datatype": "INT8", "shape": [1], "data": [300]},
        {"name": "y", "datatype": "FP32", "shape": [1], "data": ["abc"]},
    ],
)
def test_data_that_do_not_fit_the_datatype_are_refused(output: dict[str, Any]) -> None:
    with pytest.raises(CodecError, match="output 'y' has data that are not"):
        kserve_codec.from_json_output(output)


@pytest.mark.parametrize(
    "output",
    [
        {"datatype": "FP32", "shape": [1], "data": [1]},
        {"name": "y", "datatype": "FOO", "shape": [1], "data": [1]},
        {"name": "y", "datatype": "FP32", "shape": [3], "data": [1, 2]},
    ],
)
def test_malformed_json_outputs_are_refused(output: dict[str, Any]) -> None:
    with pytest.raises(CodecError):
        kserve_codec.from_json_output(output)


def test_input_arrays_from_a_request() -> None:
    request = pb.ModelInferRequest(
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name="a", datatype="FP32", shape=[2, 3]),
            pb.ModelInferRequest.InferInputTensor(name="b", datatype="BYTES", shape=[2, 3]),
        ],
        raw_input_contents=[_raw_of("FP32", SAMPLES["FP32"]), _raw_of("BYTES", SAMPLES["BYTES"])],
    )
    (a_meta, a), (b_meta, b) = kserve_codec.input_arrays(request)
    assert (a_meta.name, b_meta.name) == ("a", "b")
    np.testing.assert_array_equal(a, SAMPLES["FP32"])
    assert b.tolist() == SAMPLES["BYTES"].tolist()
    assert kserve_codec.to_torch(a, "FP32").dtype is torch.float32
    assert kserve_codec.to_torch(
        kserve_codec.from_raw("BF16", (2, 3), _raw_of("BF16", SAMPLES["BF16"])), "BF16"
    ).dtype is (torch.bfloat16)


def test_outputs_in_shared_memory_carry_their_parameters_and_keep_later_raw_entries_in_place() -> None:
    region = {"shared_memory_region": pb.InferParameter(string_param="out")}
    first = kserve_codec.WireTensor("a", "INT8", (1,), b"\x01")
    second = kserve_codec.WireTensor("b", "INT8", (1,), b"\x02")
    before = kserve_codec.response([first, second], typed=False, shared={"a": region})
    assert list(before.raw_output_contents) == [b"", b"\x02"]
    assert before.outputs[0].parameters["shared_memory_region"].string_param == "out"
    after = kserve_codec.response([second, first], typed=False, shared={"a": region})
    assert list(after.raw_output_contents) == [b"\x02"]
    alone = kserve_codec.response([first], typed=False, shared={"a": region})
    assert list(alone.raw_output_contents) == []


def test_inputs_read_from_shared_memory_take_the_place_of_raw_entries() -> None:
    request = pb.ModelInferRequest(
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name="a", datatype="INT16", shape=[2]),
            pb.ModelInferRequest.InferInputTensor(name="b", datatype="INT8", shape=[1]),
        ],
        raw_input_contents=[b"\x05"],
    )
    shared = bytearray(b"\x01\x00\x02\x00")
    [(_, a), (_, b)] = kserve_codec.input_arrays(request, {"a": shared})
    assert a.tolist() == [1, 2]
    assert b.tolist() == [5]
    a[0] = 9  # the array is built on the buffer read from shared memory, not on a copy of it
    assert shared[0] == 9


def test_bytes_read_from_shared_memory_are_checked() -> None:
    with pytest.raises(kserve_codec.CodecError, match="incomplete string data"):
        kserve_codec.split_bytes(bytearray(b"\x05\x00\x00\x00ab"))
    with pytest.raises(kserve_codec.CodecError, match="incomplete string length"):
        kserve_codec.split_bytes(bytearray(b"\x01\x00"))
