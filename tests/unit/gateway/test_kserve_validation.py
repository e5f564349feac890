"""KServe v2 request validation (shared/research/kserve_v2.md section 8, items 11-26 and 30), through the
gRPC converter so the rules are checked on what clients actually send."""

import struct
from collections.abc import Sequence
from typing import Any

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.datatypes import DATATYPES
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve.grpc_codec import to_kserve_request
from sluice_gateway.kserve.validation import check_request

Input = pb.ModelInferRequest.InferInputTensor

# A value of each typed field, and the datatypes it carries.
TYPED_VALUE = {
    "bool_contents": True,
    "int_contents": 1,
    "int64_contents": 1,
    "uint_contents": 1,
    "uint64_contents": 1,
    "fp32_contents": 1.0,
    "fp64_contents": 1.0,
    "bytes_contents": b"x",
}
TYPED_DATATYPES = [name for name, d in DATATYPES.items() if d.contents_field is not None]
FIXED_SIZE = [name for name, d in DATATYPES.items() if d.byte_size]


def _request(*inputs: Input, raw: list[bytes] | None = None, outputs: Sequence[str] = (), **kw: Any) -> Any:
    message = pb.ModelInferRequest(
        model_name="m",
        inputs=list(inputs),
        raw_input_contents=raw or [],
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name=name) for name in outputs],
        **kw,
    )
    return to_kserve_request(pb.ModelInferRequest.FromString(message.SerializeToString()))


def _typed(name: str, datatype: str, shape: list[int], field: str, values: list[Any]) -> Input:
    return Input(
        name=name, datatype=datatype, shape=shape, contents=pb.InferTensorContents(**{field: values})
    )


def _raw_input(name: str, datatype: str, shape: list[int]) -> Input:
    return Input(name=name, datatype=datatype, shape=shape)


def _bytes_raw(*elements: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def _invalid(request: Any, tensors: ModelTensors | None = None) -> str:
    with pytest.raises(SluiceError) as caught:
        check_request(request, tensors or ModelTensors())
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    return caught.value.message


DECLARED = ModelTensors(
    inputs=(
        TensorSpec(name="INPUT0", datatype="FP32", shape=(-1, 16)),
        TensorSpec(name="MASK", datatype="BOOL", shape=(16,), optional=True),
    ),
    outputs=(TensorSpec(name="OUTPUT0", datatype="FP32", shape=(-1, 16)),),
)
BATCHED = ModelTensors(
    max_batch_size=4,
    inputs=(
        TensorSpec(name="A", datatype="INT32", shape=(3,)),
        TensorSpec(name="B", datatype="INT32", shape=(3,)),
    ),
    outputs=(TensorSpec(name="OUT", datatype="INT32", shape=(3,)),),
)


# Item 11/15: raw data for every fixed-size datatype, exact byte size accepted, one byte off refused.
@pytest.mark.parametrize("datatype", FIXED_SIZE)
def test_raw_byte_size_must_match_shape_times_element_size(datatype: str) -> None:
    size = DATATYPES[datatype].byte_size * 6
    check_request(_request(_raw_input("x", datatype, [2, 3]), raw=[b"\x01" * size]), ModelTensors())
    message = _invalid(_request(_raw_input("x", datatype, [2, 3]), raw=[b"\x01" * (size - 1)]))
    assert message == f"input byte size mismatch for input 'x' for model 'm'. Expected {size}, got {size - 1}"


# Item 12: typed data for every datatype that has a field.
@pytest.mark.parametrize("datatype", TYPED_DATATYPES)
def test_typed_contents_in_the_datatypes_field_are_accepted(datatype: str) -> None:
    field = DATATYPES[datatype].contents_field
    assert field is not None
    check_request(_request(_typed("x", datatype, [2, 2], field, [TYPED_VALUE[field]] * 4)), ModelTensors())


# Item 16: typed element count vs shape.
@pytest.mark.parametrize("datatype", TYPED_DATATYPES)
def test_typed_element_count_must_match_the_shape(datatype: str) -> None:
    field = DATATYPES[datatype].contents_field
    assert field is not None
    message = _invalid(_request(_typed("x", datatype, [2, 2], field, [TYPED_VALUE[field]] * 3)))
    assert message == "unexpected number of elements for input 'x' for model 'm'. Expected 4, got 3"


# Item 17: contents field vs datatype; two fields on one input.
@pytest.mark.parametrize("datatype", TYPED_DATATYPES)
def test_a_contents_field_of_another_datatype_is_refused(datatype: str) -> None:
    field = DATATYPES[datatype].contents_field
    other = "fp64_contents" if field != "fp64_contents" else "int_contents"
    message = _invalid(_request(_typed("x", datatype, [1], other, [TYPED_VALUE[other]])))
    assert message.startswith("unexpected explicit tensor data for input tensor 'x' for model 'm'")


def test_two_contents_fields_on_one_input_are_refused() -> None:
    contents = pb.InferTensorContents(fp32_contents=[1.0], int_contents=[1])
    message = _invalid(_request(Input(name="x", datatype="FP32", shape=[1], contents=contents)))
    assert "more than one contents field" in message


# Item 18: FP16 / BF16 raw only.
@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
@pytest.mark.parametrize("field", ["fp32_contents", "int_contents", "bytes_contents"])
def test_half_precision_types_are_raw_only(datatype: str, field: str) -> None:
    message = _invalid(_request(_typed("x", datatype, [1], field, [TYPED_VALUE[field]])))
    assert message.startswith(
        f"{datatype} data for input 'x' for model 'm' must be sent in raw_input_contents"
    )


# Item 13: raw plus typed contents.
def test_contents_next_to_raw_input_contents_are_refused() -> None:
    request = _request(
        _raw_input("a", "INT32", [1]), _typed("b", "INT32", [1], "int_contents", [1]), raw=[b"\0" * 4]
    )
    message = _invalid(request)
    assert (
        message == "contents field must not be specified when using raw_input_contents for 'b' for model 'm'"
    )


# Item 14: raw entry count vs inputs, fewer and more.
@pytest.mark.parametrize("entries", [1, 3])
def test_raw_entry_count_must_match_the_inputs(entries: int) -> None:
    request = _request(_raw_input("a", "INT8", [1]), _raw_input("b", "INT8", [1]), raw=[b"\0"] * entries)
    message = _invalid(request)
    assert message == (
        f"the number of inputs (2) does not match the expected number of raw input contents ({entries}) "
        "for model 'm'"
    )


def test_an_input_without_any_data_is_refused_unless_it_is_empty() -> None:
    assert _invalid(_request(_raw_input("a", "FP32", [2]))) == (
        "unable to find data for input tensor 'a' for model 'm' in request."
    )
    check_request(_request(_raw_input("a", "FP32", [0, 4])), ModelTensors())


# Item 19: BYTES framing.
def test_bytes_raw_elements_are_length_prefixed_and_may_be_empty() -> None:
    check_request(
        _request(_raw_input("s", "BYTES", [3]), raw=[_bytes_raw(b"abc", b"", b"\xff\x00")]), ModelTensors()
    )


def test_bytes_raw_with_a_truncated_length_prefix_is_refused() -> None:
    message = _invalid(_request(_raw_input("s", "BYTES", [2]), raw=[_bytes_raw(b"abc") + b"\x01\x00"]))
    assert message.startswith("incomplete string length indicator for inference input 's'")


def test_bytes_raw_with_an_element_past_the_end_is_refused() -> None:
    message = _invalid(_request(_raw_input("s", "BYTES", [1]), raw=[struct.pack("<I", 10) + b"abc"]))
    assert message.startswith("incomplete string data for inference input 's'")


def test_bytes_raw_element_count_must_match_the_shape() -> None:
    message = _invalid(_request(_raw_input("s", "BYTES", [3]), raw=[_bytes_raw(b"a", b"b")]))
    assert (
        message == "unexpected number of string elements 2 for inference input 's' for model 'm', expecting 3"
    )


# Item 20: BOOL raw bytes are 0 or 1.
def test_bool_raw_bytes_must_be_zero_or_one() -> None:
    check_request(_request(_raw_input("b", "BOOL", [3]), raw=[b"\x00\x01\x01"]), ModelTensors())
    message = _invalid(_request(_raw_input("b", "BOOL", [3]), raw=[b"\x00\x02\x01"]))
    assert "bytes must be 0 or 1" in message


# Item 21: unknown datatypes, case-sensitive.
@pytest.mark.parametrize("datatype", ["FOO", "fp32", "", "STRING"])
def test_unknown_datatypes_are_refused(datatype: str) -> None:
    message = _invalid(_request(_raw_input("x", datatype, [1]), raw=[b"\0" * 4]))
    assert message.startswith(f"unsupported datatype '{datatype}' for input 'x' for model 'm'")


def test_negative_request_dimensions_are_refused() -> None:
    message = _invalid(_request(_raw_input("x", "FP32", [-1, 4]), raw=[b""]))
    assert message.startswith("unexpected shape for input 'x' for model 'm': dimensions must be >= 0")


# Item 24: duplicate inputs (with or without a declaration), missing and unknown ones.
def test_duplicate_input_names_are_refused() -> None:
    request = _request(_raw_input("a", "INT8", [1]), _raw_input("a", "INT8", [1]), raw=[b"\0", b"\0"])
    assert _invalid(request) == "input 'a' is specified more than once for model 'm'"


def test_a_missing_required_input_is_refused_and_optional_ones_may_be_left_out() -> None:
    check_request(_request(_raw_input("INPUT0", "FP32", [2, 16]), raw=[b"\0" * 128]), DECLARED)
    message = _invalid(_request(_raw_input("MASK", "BOOL", [16]), raw=[b"\0" * 16]), DECLARED)
    assert message.startswith("expected 1 inputs but got 1 inputs for model 'm'")
    assert "missing required input(s) ['INPUT0']" in message


def test_an_input_the_model_does_not_declare_is_refused() -> None:
    request = _request(
        _raw_input("INPUT0", "FP32", [1, 16]), _raw_input("EXTRA", "INT8", [1]), raw=[b"\0" * 64, b"\0"]
    )
    assert _invalid(request, DECLARED) == "unexpected inference input 'EXTRA' for model 'm'"


# Item 22: declared datatype.
def test_the_declared_datatype_is_enforced() -> None:
    message = _invalid(_request(_raw_input("INPUT0", "INT32", [1, 16]), raw=[b"\0" * 64]), DECLARED)
    assert message == "inference input 'INPUT0' data-type is 'INT32', but model 'm' expects 'FP32'"


# Item 23: declared shape (-1 is a wildcard, rank must match).
@pytest.mark.parametrize("shape", [[1, 8], [16], [1, 1, 16]])
def test_the_declared_shape_is_enforced(shape: list[int]) -> None:
    count = 1
    for dim in shape:
        count *= dim
    message = _invalid(_request(_raw_input("INPUT0", "FP32", shape), raw=[b"\0" * 4 * count]), DECLARED)
    got = ",".join(map(str, shape))
    assert message == f"unexpected shape for input 'INPUT0' for model 'm'. Expected [-1,16], got [{got}]"


# Item 25: batch dimension of a batching model.
def test_a_batching_model_takes_a_leading_batch_dimension_up_to_max_batch_size() -> None:
    def request(a: list[int], b: list[int]) -> Any:
        return _request(
            _raw_input("A", "INT32", a),
            _raw_input("B", "INT32", b),
            raw=[b"\0" * 12 * a[0], b"\0" * 12 * b[0]],
        )

    check_request(request([4, 3], [4, 3]), BATCHED)
    assert _invalid(request([5, 3], [5, 3]), BATCHED) == "inference request batch-size must be <= 4 for 'm'"
    assert (
        _invalid(request([2, 3], [3, 3]), BATCHED)
        == "input 'B' batch size does not match other inputs for 'm'"
    )
    message = _invalid(
        _request(_raw_input("A", "INT32", [3]), _raw_input("B", "INT32", [1, 3]), raw=[b"\0" * 12] * 2),
        BATCHED,
    )
    assert message == "unexpected shape for input 'A' for model 'm'. Expected [-1,3], got [3]"


def test_a_batching_model_refuses_a_scalar_input() -> None:
    request = _request(
        _raw_input("A", "INT32", []), _raw_input("B", "INT32", [1, 3]), raw=[b"\0" * 4, b"\0" * 12]
    )
    assert _invalid(request, BATCHED) == "input 'A' has no shape but model requires batch dimension for 'm'"


# Item 30: requested outputs.
def test_requested_outputs_must_be_declared_and_unique() -> None:
    base = [_raw_input("INPUT0", "FP32", [1, 16])]
    check_request(_request(*base, raw=[b"\0" * 64], outputs=["OUTPUT0"]), DECLARED)
    assert _invalid(_request(*base, raw=[b"\0" * 64], outputs=["NOPE"]), DECLARED) == (
        "unexpected inference output 'NOPE' for model 'm'"
    )
    assert "requested more than once" in _invalid(
        _request(*base, raw=[b"\0" * 64], outputs=["OUTPUT0", "OUTPUT0"]), DECLARED
    )


def test_an_undeclared_model_accepts_any_well_formed_request() -> None:
    request = _request(
        _raw_input("anything", "FP16", [3]),
        _raw_input("else", "BYTES", [1]),
        raw=[b"\0" * 6, _bytes_raw(b"x")],
        outputs=["whatever"],
    )
    check_request(request, ModelTensors())


def test_classification_is_refused() -> None:
    message = pb.ModelInferRequest(
        model_name="m",
        inputs=[_typed("x", "FP32", [1], "fp32_contents", [1.0])],
        outputs=[
            pb.ModelInferRequest.InferRequestedOutputTensor(
                name="y", parameters={"classification": pb.InferParameter(int64_param=3)}
            )
        ],
    )
    assert "classification extension is not supported" in _invalid(to_kserve_request(message))


# Item 26: an empty request is refused as a request (the unknown model comes first on the server).
def test_an_empty_request_has_nothing_to_validate() -> None:
    check_request(to_kserve_request(pb.ModelInferRequest()), ModelTensors())
