import struct

import pytest
from sluice.v1 import kserve_pb2, torchserve_inference_pb2

from bench.payloads import (
    Payloads,
    grpc_frame,
    model_infer_request,
    parse_grpc_frame,
    prediction_of,
    read_stream_stamp,
    stream_stamp,
    tensor_bytes,
)


def test_tensor_bytes_are_deterministic_float32() -> None:
    data = tensor_bytes((3, 4), seed=1)
    assert len(data) == 3 * 4 * 4
    assert data == tensor_bytes((3, 4), seed=1)
    assert data != tensor_bytes((3, 4), seed=2)
    values = struct.unpack("<12f", data)
    assert all(-1.0 <= value < 1.0 for value in values)


def test_predictions_request_carries_the_raw_input() -> None:
    payloads = Payloads.build("mlp_b1_w1", (64,))
    request = torchserve_inference_pb2.PredictionsRequest.FromString(payloads.predictions)
    assert request.model_name == "mlp_b1_w1"
    assert request.input["data"] == payloads.data
    assert payloads.rest == payloads.data


def test_model_infer_request_uses_raw_contents_with_a_batch_dimension() -> None:
    data = tensor_bytes((64,))
    request = kserve_pb2.ModelInferRequest.FromString(model_infer_request("m", data, (64,)))
    assert request.model_name == "m"
    assert [(i.name, i.datatype, list(i.shape)) for i in request.inputs] == [("INPUT__0", "FP32", [1, 64])]
    assert list(request.raw_input_contents) == [data]


def test_grpc_frame_round_trip_and_header() -> None:
    frame = grpc_frame(b"abc")
    assert frame[:5] == b"\x00\x00\x00\x00\x03"
    assert parse_grpc_frame(frame) == b"abc"
    with pytest.raises(ValueError, match="carries"):
        parse_grpc_frame(frame + b"x")
    with pytest.raises(ValueError, match="compressed"):
        parse_grpc_frame(b"\x01" + frame[1:])


def test_stream_stamp_round_trip_through_a_prediction_response() -> None:
    response = torchserve_inference_pb2.PredictionResponse(prediction=stream_stamp(123456789, 7))
    assert read_stream_stamp(prediction_of(response.SerializeToString())) == (123456789, 7)
