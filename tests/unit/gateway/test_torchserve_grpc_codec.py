"""The TorchServe gRPC codec: requests to calls, sequence headers and echoes, in-stream error statuses."""

import grpc
import pytest
from google.rpc import error_details_pb2
from sluice.errors import ErrorCode, SluiceError
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest
from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.sequences import SequenceHeaders
from sluice_gateway.torchserve.grpc_codec import (
    error_response,
    in_stream_status,
    parse_request,
    sequence_step,
    sequence_suffix,
    to_call,
)


def test_in_stream_status_has_code_message_and_error_info() -> None:
    status = in_stream_status(SluiceError(ErrorCode.QUEUE_FULL, "full"))
    assert (status.code, status.message) == (grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], "full")
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "org.pytorch.serve.http.ServiceUnavailableException"


def test_error_response_overrides_the_code_and_echoes_the_sequence() -> None:
    raw = error_response(SluiceError(ErrorCode.INVALID_ARGUMENT, "x"), "s1", grpc.StatusCode.INTERNAL)
    response = PredictionResponse.FromString(raw)
    assert (response.prediction, response.sequence_id, response.status.code) == (b"", "s1", 13)


def test_parse_request_rejects_garbage() -> None:
    with pytest.raises(SluiceError) as caught:
        parse_request(b"\xff\xff\xff")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def test_to_call_requires_a_model_name() -> None:
    with pytest.raises(SluiceError) as caught:
        to_call(PredictionsRequest(), b"", None)
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "Parameter model_name is required.",
    )


def test_to_call_forwards_the_raw_bytes() -> None:
    request = PredictionsRequest(model_name="m", model_version="2", input={"data": b"x"})
    raw = request.SerializeToString()
    call = to_call(request, raw, 1.5)
    assert (call.model, call.version, call.request, call.timeout_s) == ("m", "2", raw, 1.5)


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({}, {}),
        ({"ts_request_sequence_start": b"true"}, {"ts_request_sequence_start": "true"}),
        ({"ts_request_sequence_end": b" True "}, {"ts_request_sequence_end": "true"}),
        ({"ts_request_sequence_start": b"false", "ts_request_sequence_end": b"no"}, {}),
    ],
)
def test_sequence_headers_mark_start_and_end_only_when_asked(
    inputs: dict[str, bytes], expected: dict[str, str]
) -> None:
    request = PredictionsRequest(model_name="m", sequence_id="s", input=inputs)
    step = sequence_step(request)
    assert step is not None
    assert SequenceHeaders().of(step) == {"ts_request_sequence_id": "s", **expected}


def test_a_request_without_a_sequence_id_names_no_sequence() -> None:
    marked_only = PredictionsRequest(model_name="m", input={"ts_request_sequence_start": b"true"})
    assert sequence_step(marked_only) is None
    unmarked = sequence_step(PredictionsRequest(model_name="m", sequence_id="s"))
    assert unmarked == SequenceStep("s", start=None, end=False), "an unmarked first request starts it"


def test_sequence_id_echo_merges_into_the_worker_payload() -> None:
    payload = PredictionResponse(prediction=b"p").SerializeToString()
    merged = PredictionResponse.FromString(payload + sequence_suffix("seq-1"))
    assert (merged.prediction, merged.sequence_id) == (b"p", "seq-1")
    assert sequence_suffix("") == b""
