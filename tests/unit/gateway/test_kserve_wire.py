"""Framing of worker-built ModelInferResponse bytes without parsing them."""

from typing import Any

import pytest
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve.grpc_wire import (
    WireError,
    has_outputs,
    stream_response,
    top_level_fields,
    varint,
    without_parameters,
)


def _response(**kw: Any) -> bytes:
    return pb.ModelInferResponse(id="r1", model_name="m", model_version="1", **kw).SerializeToString()


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63])
def test_varint_matches_protobuf(value: int) -> None:
    encoded = pb.StatisticDuration(count=value).SerializeToString()
    assert encoded == b"\x08" + varint(value) if value else encoded == b""


def test_has_outputs() -> None:
    assert not has_outputs(_response())
    assert not has_outputs(b"")
    assert has_outputs(_response(raw_output_contents=[b"\0" * 4]))
    assert has_outputs(_response(outputs=[pb.ModelInferResponse.InferOutputTensor(name="y")]))
    assert top_level_fields(_response(parameters={"k": pb.InferParameter(double_param=1.0)})) == {1, 2, 3, 4}


def test_truncated_messages_are_refused() -> None:
    with pytest.raises(WireError):
        top_level_fields(_response(raw_output_contents=[b"\0" * 40])[:-5])


@pytest.mark.parametrize("final", [True, False])
def test_stream_response_wraps_the_response_and_sets_the_final_flag(final: bool) -> None:
    raw = _response(
        raw_output_contents=[b"\1" * 300],
        parameters={
            "triton_final_response": pb.InferParameter(bool_param=not final),
            "x": pb.InferParameter(),
        },
    )
    message = pb.ModelStreamInferResponse.FromString(stream_response(raw, final=final))
    assert message.error_message == ""
    response = message.infer_response
    assert (response.id, response.model_name, response.model_version) == ("r1", "m", "1")
    assert response.raw_output_contents == [b"\1" * 300]
    assert response.parameters["triton_final_response"].bool_param is final
    assert "x" in response.parameters


def test_without_parameters_drops_only_the_named_request_parameters() -> None:
    request = pb.ModelInferRequest(
        model_name="m",
        id="r",
        parameters={
            "sequence_id": pb.InferParameter(int64_param=7),
            "sequence_end": pb.InferParameter(bool_param=True),
            "temperature": pb.InferParameter(double_param=0.5),
        },
        inputs=[
            pb.ModelInferRequest.InferInputTensor(
                name="x", parameters={"sequence_id": pb.InferParameter(string_param="kept")}
            )
        ],
        raw_input_contents=[b"\x01" * 200],
    )
    raw = request.SerializeToString()
    stripped = pb.ModelInferRequest.FromString(without_parameters(raw, {"sequence_id", "sequence_end"}))
    expected = pb.ModelInferRequest()
    expected.CopyFrom(request)
    del expected.parameters["sequence_id"]
    del expected.parameters["sequence_end"]
    assert stripped == expected, "tensor parameters and everything else are kept"
    assert without_parameters(raw, {"other"}) == raw
