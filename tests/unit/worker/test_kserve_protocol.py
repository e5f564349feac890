"""KServe v2 jobs in the worker: handler rows in both modes (through TorchServe's own request decoding)
and the ModelInferResponse built from a row's result."""

import json
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.v1 import kserve_pb2 as pb
from sluice_worker.protocols import NO_TENSORS, Protocols, kserve_codec
from sluice_worker.protocols.kserve import TENSOR_ROW_HEADER, KServe
from ts.service import Service

TENSOR_MODE = ModelTensors(tensor_handler=True)
DECLARED = ModelTensors(outputs=(TensorSpec(name="y", datatype="FP16", shape=(-1,)),))


def _job(**fields: Any) -> Job:
    request = pb.ModelInferRequest(
        model_name="m",
        id="client-1",
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[2, 2]),
            pb.ModelInferRequest.InferInputTensor(name="s", datatype="BYTES", shape=[1]),
        ],
        raw_input_contents=[struct.pack("<4f", 1, 2, 3, 4), struct.pack("<I", 2) + b"hi"],
        **fields,
    )
    return Job(
        job_id="job-1",
        protocol=WireProtocol.KSERVE,
        model_name="m",
        model_version="2.0",
        request=request.SerializeToString(),
    )


def _rows(job: Job, tensors: ModelTensors) -> tuple[Any, Any]:
    processors, rows, ids = Service.retrieve_data_for_inference([Protocols(tensors).handler_request(job)])
    assert ids == {0: "job-1"}
    return processors[0], rows[0]


def test_body_rows_are_torchserves_oip_json() -> None:
    job = _job(
        parameters={"temperature": pb.InferParameter(double_param=0.5)},
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="y")],
    )
    processor, row = _rows(job, ModelTensors())
    assert row == {
        "body": {
            "id": "client-1",
            "model_name": "m",
            "model_version": "2.0",
            "inputs": [
                {"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]},
                {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
            ],
            "parameters": {"temperature": 0.5},
            "outputs": [{"name": "y"}],
        }
    }
    assert processor.get_request_property("body") == {"content-type": "application/json"}


def test_typed_inputs_give_the_same_rows() -> None:
    job = _job()
    request = pb.ModelInferRequest.FromString(job.request)
    request.ClearField("raw_input_contents")
    request.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
    request.inputs[1].contents.bytes_contents.append(b"hi")
    typed = Job(**{**_fields(job), "request": request.SerializeToString()})
    assert _rows(typed, ModelTensors())[1] == _rows(job, ModelTensors())[1]


def _fields(job: Job) -> dict[str, Any]:
    return {f.name: getattr(job, f.name) for f in Job.DESCRIPTOR.fields if f.name != "headers"}


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_tensor_rows_hold_arrays(library: str) -> None:
    tensors = ModelTensors(tensor_handler=True, tensor_library=library)  # type: ignore[arg-type]
    processor, row = _rows(_job(parameters={"k": pb.InferParameter(string_param="v")}), tensors)
    assert set(row) == {"x", "s"}
    kind = torch.Tensor if library == "torch" else np.ndarray
    assert isinstance(row["x"], kind)
    assert row["x"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert row["s"].tolist() == [b"hi"]
    assert processor.get_request_property(TENSOR_ROW_HEADER) == "true"
    assert json.loads(processor.get_request_property("sluice_v2_parameters")) == {"k": "v"}


def test_an_undecodable_request_is_a_client_error() -> None:
    job = Job(job_id="j", protocol=WireProtocol.KSERVE, request=b"\xff\xff")
    with pytest.raises(SluiceError) as caught:
        Protocols().handler_request(job)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT


def _response(job: Job, body: bytes, tensors: ModelTensors = NO_TENSORS) -> pb.ModelInferResponse:
    return pb.ModelInferResponse.FromString(Protocols(tensors).reply_payload(job, body))


V2_JSON = json.dumps(
    {
        "id": "ignored",
        "outputs": [
            {"name": "y", "datatype": "FP32", "shape": [2], "data": [1.5, 2.5]},
            {"name": "t", "datatype": "BYTES", "shape": [1], "data": ["ok"]},
        ],
    },
    indent=2,
).encode()


ECHOED = [b"hello", "wörld".encode(), b"\xff\x00\x80"]


def _bytes_job(*, typed: bool) -> Job:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="s", datatype="BYTES", shape=[1, 3])
    if typed:
        request.inputs[0].contents.bytes_contents.extend(ECHOED)
        request.parameters["binary_data_output"].bool_param = False
    else:
        request.raw_input_contents.append(b"".join(struct.pack("<I", len(e)) + e for e in ECHOED))
    return Job(
        job_id="job-1", protocol=WireProtocol.KSERVE, model_name="m", request=request.SerializeToString()
    )


@pytest.mark.parametrize("typed", [False, True])
def test_a_json_handler_echoing_bytes_answers_the_same_bytes(typed: bool) -> None:
    job = _bytes_job(typed=typed)
    _, row = _rows(job, ModelTensors())
    (seen,) = row["body"]["inputs"]
    assert seen["data"] == ["hello", "wörld", {"b64": "/wCA"}]
    echo = {"outputs": [{**seen, "name": "out"}]}
    response = _response(job, json.dumps(echo, indent=2).encode())  # TorchServe's serialization
    assert (response.outputs[0].datatype, list(response.outputs[0].shape)) == ("BYTES", [1, 3])
    if typed:
        assert list(response.outputs[0].contents.bytes_contents) == ECHOED
    else:
        assert (
            response.raw_output_contents[0]
            == pb.ModelInferRequest.FromString(job.request).raw_input_contents[0]
        )


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_a_tensor_handler_echoing_bytes_answers_the_same_bytes(library: str) -> None:
    tensors = ModelTensors(tensor_handler=True, tensor_library=library)  # type: ignore[arg-type]
    job = _bytes_job(typed=False)
    _, row = _rows(job, tensors)
    assert row["s"].tolist() == [ECHOED]
    response = _response(job, kserve_codec.tensor_result({"out": row["s"]}), tensors)
    assert (
        response.raw_output_contents[0] == pb.ModelInferRequest.FromString(job.request).raw_input_contents[0]
    )


def test_a_json_result_becomes_a_raw_response_with_ids() -> None:
    response = _response(_job(), V2_JSON)
    assert (response.id, response.model_name, response.model_version) == ("client-1", "m", "2.0")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("y", "FP32", [2]),
        ("t", "BYTES", [1]),
    ]
    assert list(response.raw_output_contents) == [struct.pack("<2f", 1.5, 2.5), struct.pack("<I", 2) + b"ok"]


def test_requested_outputs_and_typed_contents() -> None:
    job = _job(
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="t")],
        parameters={"binary_data_output": pb.InferParameter(bool_param=False)},
    )
    response = _response(job, V2_JSON)
    assert [o.name for o in response.outputs] == ["t"]
    assert not response.raw_output_contents
    assert list(response.outputs[0].contents.bytes_contents) == [b"ok"]


def test_declared_output_types_win() -> None:
    response = _response(_job(), V2_JSON, DECLARED)
    assert response.outputs[0].datatype == "FP16"
    assert response.raw_output_contents[0] == np.array([1.5, 2.5], dtype="<f2").tobytes()


def test_a_tensor_set_result() -> None:
    body = kserve_codec.tensor_result({"y": np.arange(3, dtype=np.int16)})
    response = _response(_job(), body)
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [("y", "INT16", [3])]
    assert response.raw_output_contents[0] == np.arange(3, dtype="<i2").tobytes()


@pytest.mark.parametrize("body", [b"", b"null", b'{"outputs": []}'])
def test_an_empty_result_has_no_outputs(body: bytes) -> None:
    response = _response(_job(), body)
    assert (response.id, len(response.outputs)) == ("client-1", 0)


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"predictions": [1]}', b'{"outputs": [{"name": "y", "datatype": "FOO", "data": []}]}'],
)
def test_results_that_are_not_v2_fail_the_job(body: bytes) -> None:
    with pytest.raises(SluiceError) as caught:
        Protocols().reply_payload(_job(), body)
    assert caught.value.code is ErrorCode.HANDLER_FAILED
    assert caught.value.http_status == 500
    assert caught.value.message.startswith("Invalid v2 inference result")


def test_a_requested_output_the_handler_did_not_produce() -> None:
    job = _job(outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="zz")])
    with pytest.raises(SluiceError) as caught:
        Protocols().reply_payload(job, V2_JSON)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert caught.value.message == "unexpected inference output 'zz' for model 'm'"


def test_the_entry_point_wrapper_packs_only_tensor_rows() -> None:
    def handle(data: Any, context: Any) -> Any:
        return None if data is None else [{"y": np.ones(2, dtype=np.float32)}, {"y": [1]}, "text"]

    headers = {0: "true", 1: "", 2: "true"}
    context = SimpleNamespace(
        get_request_header=lambda idx, key: headers[idx] if key == TENSOR_ROW_HEADER else None
    )
    wrapped = KServe(TENSOR_MODE).tensor_entry_point(handle)
    assert wrapped(None, context) is None
    packed, untouched, text = wrapped([{}, {}, {}], context)
    assert packed.startswith(kserve_codec.TENSOR_SET_MAGIC)
    assert untouched == {"y": [1]}
    assert text == "text"
