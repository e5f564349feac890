"""Request-level parameters (checklist item 33): Triton's reserved keys checked, custom keys passed on."""

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.kserve.grpc_codec import parameters
from sluice_gateway.kserve.request import Parameter, RequestOptions, request_options


def _options(**values: pb.InferParameter) -> RequestOptions:
    return request_options(parameters(values))


def _refused(**values: pb.InferParameter) -> str:
    with pytest.raises(SluiceError) as caught:
        _options(**values)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    return caught.value.message


def test_defaults() -> None:
    assert _options() == RequestOptions(
        timeout_s=None, priority=0, empty_final_response=False, typed_outputs=False
    )


def test_every_oneof_kind_is_read() -> None:
    got = parameters(
        {
            "b": pb.InferParameter(bool_param=True),
            "i": pb.InferParameter(int64_param=-3),
            "s": pb.InferParameter(string_param="x"),
            "d": pb.InferParameter(double_param=0.5),
            "u": pb.InferParameter(uint64_param=2**63),
            "none": pb.InferParameter(),
        }
    )
    assert got == {
        "b": Parameter("bool", True),
        "i": Parameter("int64", -3),
        "s": Parameter("string", "x"),
        "d": Parameter("double", 0.5),
        "u": Parameter("uint64", 2**63),
        "none": Parameter(None),
    }


@pytest.mark.parametrize("value", [pb.InferParameter(int64_param=3), pb.InferParameter(uint64_param=3)])
def test_priority_is_int64_or_uint64(value: pb.InferParameter) -> None:
    assert _options(priority=value).priority == 3


@pytest.mark.parametrize(
    "value",
    [
        pb.InferParameter(string_param="1"),
        pb.InferParameter(double_param=1.0),
        pb.InferParameter(bool_param=True),
    ],
)
def test_priority_of_another_type_is_refused(value: pb.InferParameter) -> None:
    assert _refused(priority=value) == (
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param."
    )


def test_negative_priority_is_refused() -> None:
    assert "expected a value >= 0" in _refused(priority=pb.InferParameter(int64_param=-1))


def test_timeout_is_int64_microseconds() -> None:
    assert _options(timeout=pb.InferParameter(int64_param=2_500_000)).timeout_s == 2.5
    assert _refused(timeout=pb.InferParameter(uint64_param=5)) == (
        "invalid value type for 'timeout' parameter, expected int64_param."
    )
    assert "expected a value >= 0" in _refused(timeout=pb.InferParameter(int64_param=-5))


def test_only_one_triton_key_is_allowed() -> None:
    assert _options(
        triton_enable_empty_final_response=pb.InferParameter(bool_param=True)
    ).empty_final_response
    message = _refused(triton_whatever=pb.InferParameter(bool_param=True))
    assert "reserved for Triton usage" in message
    assert "'triton_whatever'" in message
    assert "expected bool_param" in _refused(
        triton_enable_empty_final_response=pb.InferParameter(int64_param=1)
    )


def test_binary_data_output_false_asks_for_typed_outputs() -> None:
    assert _options(binary_data_output=pb.InferParameter(bool_param=False)).typed_outputs
    assert not _options(binary_data_output=pb.InferParameter(bool_param=True)).typed_outputs


def test_custom_keys_pass() -> None:
    _options(
        temperature=pb.InferParameter(double_param=0.7),
        anything=pb.InferParameter(uint64_param=1),
    )


# Sequences (Triton's correlation id and flags) -------------------------------------------------
def test_no_sequence_parameters_name_no_sequence() -> None:
    assert _options().sequence is None
    assert _options(temperature=pb.InferParameter(double_param=0.7)).sequence is None


@pytest.mark.parametrize(
    ("sequence_id", "expected"),
    [
        (pb.InferParameter(int64_param=42), "42"),
        (pb.InferParameter(string_param="abc"), "abc"),
        (pb.InferParameter(uint64_param=2**64 - 1), str(2**64 - 1)),  # REST: a JSON number past int64
        (pb.InferParameter(int64_param=-1), str(2**64 - 1)),  # Triton's correlation ids are uint64
    ],
)
def test_sequence_id_is_an_int64_or_a_string(sequence_id: pb.InferParameter, expected: str) -> None:
    assert _options(sequence_id=sequence_id).sequence == SequenceStep(expected, start=False, end=False)


def test_start_and_end_flags() -> None:
    sequence = _options(
        sequence_id=pb.InferParameter(int64_param=7),
        sequence_start=pb.InferParameter(bool_param=True),
        sequence_end=pb.InferParameter(bool_param=True),
    ).sequence
    assert sequence == SequenceStep("7", start=True, end=True)
    unmarked = _options(
        sequence_id=pb.InferParameter(int64_param=7),
        sequence_start=pb.InferParameter(bool_param=False),
    ).sequence
    assert unmarked == SequenceStep("7", start=False, end=False), "v2 joins unless START is set"


@pytest.mark.parametrize(
    "sequence_id", [pb.InferParameter(int64_param=0), pb.InferParameter(string_param="")]
)
def test_a_zero_or_empty_sequence_id_names_no_sequence(sequence_id: pb.InferParameter) -> None:
    """Triton reads 0 and "" as "no correlation id" (a stateful model then refuses the request)."""
    assert (
        _options(sequence_id=sequence_id, sequence_start=pb.InferParameter(bool_param=True)).sequence is None
    )


@pytest.mark.parametrize(
    "sequence_id",
    [pb.InferParameter(double_param=1.0), pb.InferParameter(bool_param=True), pb.InferParameter()],
)
def test_a_sequence_id_of_another_type_is_refused(sequence_id: pb.InferParameter) -> None:
    assert _refused(sequence_id=sequence_id) == (
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
    )


@pytest.mark.parametrize("flag", ["sequence_start", "sequence_end"])
def test_sequence_flags_of_another_type_are_refused(flag: str) -> None:
    values = {"sequence_id": pb.InferParameter(int64_param=1), flag: pb.InferParameter(string_param="true")}
    assert _refused(**values) == f"invalid value type for '{flag}' parameter, expected bool_param."
