"""Handler rows for each protocol, checked through TorchServe's own request decoding."""

import pytest
from sluice.envelope import LARGE_JOB_BYTES, Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest
from sluice_worker.protocols import Protocols, torchserve_grpc
from ts.service import Service

PROTOCOLS = Protocols()


def _grpc_job(inputs: dict[str, bytes], headers: dict[str, str] | None = None, job_id: str = "job-1") -> Job:
    request = PredictionsRequest(model_name="m", input=inputs)
    return Job(
        job_id=job_id,
        protocol=WireProtocol.TORCHSERVE_GRPC,
        request=request.SerializeToString(),
        headers=headers or {},
    )


def test_grpc_rows_are_bytearrays_with_empty_content_types_and_job_headers() -> None:
    job = _grpc_job({"data": b"\x00hi", "extra": b"x"}, headers={"ts_request_sequence_id": "seq-1"})
    request = PROTOCOLS.handler_request(job)
    processors, rows, ids = Service.retrieve_data_for_inference([request])
    assert rows == [{"data": bytearray(b"\x00hi"), "extra": bytearray(b"x")}]
    assert all(type(value) is bytearray for value in rows[0].values())
    assert ids == {0: "job-1"}
    assert processors[0].get_request_properties() == {
        "data": {"content-type": ""},
        "extra": {"content-type": ""},
        "ts_request_sequence_id": "seq-1",
    }


def test_a_batch_keeps_one_row_and_request_id_per_job() -> None:
    batch = [
        PROTOCOLS.handler_request(_grpc_job({"data": str(i).encode()}, job_id=f"j{i}")) for i in range(3)
    ]
    _, rows, ids = Service.retrieve_data_for_inference(batch)
    assert rows == [{"data": bytearray(str(i).encode())} for i in range(3)]
    assert ids == {0: "j0", 1: "j1", 2: "j2"}


def test_describe_rows_are_empty_with_the_describe_header() -> None:
    job = Job(job_id="d", protocol=WireProtocol.DESCRIBE)
    processors, rows, _ = Service.retrieve_data_for_inference([PROTOCOLS.handler_request(job)])
    assert rows == [{}]
    assert processors[0].get_request_property("describe") == "True"


def test_undecodable_prediction_request_is_a_client_error() -> None:
    job = Job(job_id="bad", protocol=WireProtocol.TORCHSERVE_GRPC, request=b"\xff\xff\xff")
    with pytest.raises(SluiceError) as caught:
        PROTOCOLS.handler_request(job)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("protocol", [WireProtocol.WIRE_PROTOCOL_UNSPECIFIED, 4, 99])
def test_protocols_this_worker_does_not_serve_are_refused(protocol: int) -> None:
    with pytest.raises(SluiceError) as caught:
        PROTOCOLS.handler_request(Job(job_id="x", protocol=protocol))  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INTERNAL


def test_reply_payloads() -> None:
    grpc = PROTOCOLS.reply_payload(Job(protocol=WireProtocol.TORCHSERVE_GRPC), b"out")
    assert PredictionResponse.FromString(grpc) == PredictionResponse(prediction=b"out")
    assert PROTOCOLS.reply_payload(Job(protocol=WireProtocol.DESCRIBE), b'{"a": 1}') == b'{"a": 1}'


def test_torchserve_rest_rows_and_payloads() -> None:
    job = Job(job_id="r1", protocol=WireProtocol.TORCHSERVE_REST, request=b'{"a": 1}')
    job.headers.update({"Content-Type": "application/json", "url_path": "x/y", "explain": "False"})
    request = PROTOCOLS.handler_request(job)
    assert request["parameters"] == [{"name": "body", "contentType": "application/json", "value": {"a": 1}}]
    headers = {h["name"]: h["value"] for h in request["headers"]}
    assert headers[b"url_path"] == b"x/y"
    assert headers[b"Content-Type"] == b"application/json"
    raw = Protocols(decode_input_request=False).handler_request(job)["parameters"][0]["value"]
    assert raw == bytearray(b'{"a": 1}')
    assert PROTOCOLS.reply_payload(job, b"body bytes") == b"body bytes"


def test_grpc_inputs_are_read_off_the_wire_as_protobuf_parses_them() -> None:
    # A map entry repeated: the later one wins; the values are the exact bytes sent.
    first = PredictionsRequest(input={"a": b"old"}).SerializeToString()
    second = PredictionsRequest(
        model_name="m", input={"a": b"new", "b": b"\x00\xff" * 40_000}
    ).SerializeToString()
    found = torchserve_grpc.inputs(first + second)
    assert {key: bytes(value) for key, value in found.items()} == {"a": b"new", "b": b"\x00\xff" * 40_000}


@pytest.mark.parametrize("size", [10, LARGE_JOB_BYTES])
def test_small_and_large_grpc_requests_reach_the_handler_alike(size: int) -> None:
    # Below LARGE_JOB_BYTES upb parses the request, from it the wire scanner: the rows must not differ.
    request = PredictionsRequest(
        model_name="m", input={"data": b"\x07" * size, "k": b"v"}
    ).SerializeToString()
    parameters, _ = torchserve_grpc.TorchServeGrpc().row(Job(protocol=WireProtocol.TORCHSERVE_GRPC), request)
    assert sorted(parameters, key=lambda p: p["name"]) == [
        {"name": "data", "contentType": "", "value": bytearray(b"\x07" * size)},
        {"name": "k", "contentType": "", "value": bytearray(b"v")},
    ]


@pytest.mark.parametrize("raw", [b"\x1a\x05\x0a\x01a", b"\x1a\x04\x0a\x02\xff\xfe"])
def test_a_broken_predictions_request_is_invalid_argument(raw: bytes) -> None:
    with pytest.raises(SluiceError) as refused:
        torchserve_grpc.inputs(raw)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(SluiceError) as parsed:
        torchserve_grpc.TorchServeGrpc().row(Job(protocol=WireProtocol.TORCHSERVE_GRPC), raw)
    assert parsed.value.code is ErrorCode.INVALID_ARGUMENT
