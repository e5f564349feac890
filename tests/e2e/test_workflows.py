"""TorchServe workflows (``.war``, made by the real torch-workflow-archiver) on Sluice, compared with
TorchServe 0.12 on the same archives: ``torchserve_observed/workflows.json`` holds what TorchServe
answered (``scripts/observe_torchserve_workflows.py`` records it again), and the same requests, in
the same order, must get the same status, content type and bytes from Sluice. Two answers differ on
purpose: several leaves answer in the order they finished (both servers; compared as JSON), and a
leaf that is not a JSON object gets a message that names it (TorchServe's is the leaf's text).

Then what TorchServe does not have: the workflow as a KServe v2 model (REST and gRPC) and through
TorchServe gRPC, member batching under concurrent calls, registration refused with the model API
off, and a member's worker killed mid-call."""

import concurrent.futures
import http.client
import json
import os
import signal
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from sluice.v1 import kserve_pb2 as kserve
from sluice.v1 import kserve_pb2_grpc as kserve_grpc
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub

from tests.support import workflow_archives as archives
from tests.support.cli_stack import Stack

OBSERVED = json.loads((Path(__file__).parent / "torchserve_observed" / "workflows.json").read_text())
ANSWERS: list[dict[str, Any]] = OBSERVED["answers"]
# Several leaves: TorchServe and Sluice put them in the order they finished.
IN_ANY_ORDER = {"predict_fanoutobj"}
# A leaf that is not a JSON object: TorchServe's message is the leaf's JSON text.
NAMED_LEAF = {"predict_fanout"}
SEQ_ANSWER = next(a["body"] for a in ANSWERS if a["scenario"] == "predict_seq_json").encode()


def call(
    port: int, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str | None, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=180) as response:
            return response.status, response.headers.get("Content-Type"), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type"), error.read()


def replay(stack: Stack) -> list[tuple[dict[str, Any], tuple[int, str | None, bytes]]]:
    ports = {"inference": stack.http_port, "management": stack.management_http_port}
    return [
        (
            answer,
            call(
                ports[answer["port"]],
                answer["method"],
                answer["path"],
                answer["request_body"].encode() if answer.get("request_body") is not None else None,
                answer.get("request_headers"),
            ),
        )
        for answer in ANSWERS
    ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, list[Any]]]:
    """Sluice with the model API on, every observed request replayed in order (that registers the
    workflows the other tests use), and the batched workflow registered."""
    # URLs other than this one's are refused (the model and workflow stores are not URLs).
    stack = Stack.create(tmp_path_factory.mktemp("workflows"), "allowed_urls=https://models\\.example/.*\n")
    archives.build_store(stack.store)
    stack.start([], "--enable-model-api")
    try:
        answers = replay(stack)
        for name in (archives.BATCHED, archives.STREAMED):
            registered = call(stack.management_http_port, "POST", f"/workflows?url={name}.war")
            assert registered[0] == 200, registered
        yield stack, answers
    finally:
        stack.stop()


def test_every_answer_is_torchserves(served: tuple[Stack, list[Any]]) -> None:
    _stack, answers = served
    for observed, (status, content_type, body) in answers:
        scenario = observed["scenario"]
        assert (scenario, status, content_type) == (scenario, observed["status"], observed["content_type"])
        if scenario in IN_ANY_ORDER:
            assert json.loads(body) == json.loads(observed["body"]), scenario
        elif scenario in NAMED_LEAF:
            error = json.loads(body)
            assert (error["code"], error["type"]) == (500, "InternalServerException")
            assert "Workflow leaf " in error["message"]
            assert "did not answer a JSON object" in error["message"]
        else:
            assert body.decode() == observed["body"], scenario


def test_a_url_that_allowed_urls_refuses_is_not_fetched(served: tuple[Stack, list[Any]]) -> None:
    stack, _answers = served
    status, _type, body = call(
        stack.management_http_port, "POST", "/workflows?url=http://127.0.0.1:9/evil.war"
    )
    error = json.loads(body)
    assert (status, error["type"]) == (404, "WorkflowNotFoundException")
    assert error["message"].startswith(
        "Given URL http://127.0.0.1:9/evil.war does not match any allowed URL(s)"
    )


def test_a_node_whose_model_name_is_taken_is_refused_and_nothing_is_left(
    served: tuple[Stack, list[Any]],
) -> None:
    stack, _answers = served
    port = stack.management_http_port
    assert call(port, "POST", "/models?url=double.mar&model_name=taken__double&initial_workers=0")[0] == 200
    status, _type, body = call(port, "POST", f"/workflows?url={archives.SEQ}.war&workflow_name=taken")
    error = json.loads(body)
    assert (status, error["type"]) == (409, "ConflictStatusException")
    assert "taken__double" in error["message"]
    assert call(port, "GET", "/workflows/taken")[0] == 404
    assert call(port, "GET", "/models/taken__pre")[0] == 404
    assert json.loads(call(port, "GET", "/models/taken__double")[2])[0]["modelUrl"] == "double.mar"


def test_the_workflow_is_a_kserve_v2_model(served: tuple[Stack, list[Any]]) -> None:
    stack, _answers = served
    port = stack.http_port
    assert call(port, "GET", "/v2/models/seq/ready")[0] == 200
    metadata = json.loads(call(port, "GET", "/v2/models/seq")[2])
    assert (metadata["platform"], metadata["inputs"][0]["datatype"]) == ("ensemble", "BYTES")
    config = json.loads(call(port, "GET", "/v2/models/seq/config")[2])
    steps = [step["model_name"] for step in config["ensemble_scheduling"]["step"]]
    assert steps == ["seq__pre", "seq__double", "seq__post"]
    request = {
        "inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1], "data": [archives.BODY.decode()]}]
    }
    status, _type, body = call(port, "POST", "/v2/models/seq/infer", json.dumps(request).encode(),
                               {"Content-Type": "application/json"})  # fmt: skip
    assert status == 200
    assert json.loads(body)["outputs"][0]["data"] == [SEQ_ANSWER.decode()]
    # A request that is not one BYTES element is refused, naming what the workflow takes.
    wrong = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    status, _type, body = call(port, "POST", "/v2/models/seq/infer", json.dumps(wrong).encode(),
                               {"Content-Type": "application/json"})  # fmt: skip
    assert status == 400
    assert b"one BYTES input" in body


def test_the_workflow_answers_kserve_and_torchserve_grpc(served: tuple[Stack, list[Any]]) -> None:
    stack, _answers = served
    with grpc.insecure_channel(stack.grpc_target) as channel:
        inference = kserve_grpc.GRPCInferenceServiceStub(channel)
        tensor = kserve.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[1])
        framed = struct.pack("<I", len(archives.BODY)) + archives.BODY
        request = kserve.ModelInferRequest(
            model_name="fanin", id="7", inputs=[tensor], raw_input_contents=[framed]
        )
        response = inference.ModelInfer(request, timeout=60)
        fanin = next(a["body"] for a in ANSWERS if a["scenario"] == "predict_fanin").encode()
        assert (response.id, response.raw_output_contents[0][4:]) == ("7", fanin)
        streamed = list(inference.ModelStreamInfer(iter([request]), timeout=60))
        assert streamed[-1].infer_response.raw_output_contents[0][4:] == fanin
        torchserve = InferenceAPIsServiceStub(channel)
        predicted = torchserve.Predictions(
            PredictionsRequest(model_name="seq", input={"data": archives.BODY}), timeout=60
        )
        assert predicted.prediction == SEQ_ANSWER
        chunks = list(
            torchserve.StreamPredictions(PredictionsRequest(model_name="seq", input={"data": archives.BODY}))
        )
        assert b"".join(chunk.prediction for chunk in chunks) == SEQ_ANSWER
        with pytest.raises(grpc.RpcError) as unknown:
            torchserve.Predictions(PredictionsRequest(model_name="nope", input={"data": b"x"}), timeout=60)
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND


def test_a_last_node_that_answers_in_chunks_streams_on_every_streaming_front(
    served: tuple[Stack, list[Any]],
) -> None:
    stack, _answers = served
    chunks = [b"1", b"2", b"3"]
    connection = http.client.HTTPConnection("127.0.0.1", stack.http_port, timeout=60)
    try:
        connection.request(
            "POST", f"/wfpredict/{archives.STREAMED}", archives.BODY, {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        assert (response.status, response.getheader("Transfer-Encoding")) == (200, "chunked")
        assert response.read() == b"".join(chunks)
    finally:
        connection.close()
    with grpc.insecure_channel(stack.grpc_target) as channel:
        torchserve = InferenceAPIsServiceStub(channel)
        request = PredictionsRequest(model_name=archives.STREAMED, input={"body": archives.BODY})
        assert [r.prediction for r in torchserve.StreamPredictions(request, timeout=60)] == chunks
        # A unary call gets the chunks joined.
        assert torchserve.Predictions(request, timeout=60).prediction == b"".join(chunks)
        tensor = kserve.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[1])
        framed = struct.pack("<I", len(archives.BODY)) + archives.BODY
        infer = kserve.ModelInferRequest(
            model_name=archives.STREAMED, inputs=[tensor], raw_input_contents=[framed]
        )
        responses = list(
            kserve_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([infer]), timeout=60)
        )
        assert [r.infer_response.raw_output_contents[0][4:] for r in responses] == chunks
        finals = [r.infer_response.parameters["triton_final_response"].bool_param for r in responses]
        assert finals == [False, False, True]


def test_concurrent_calls_keep_member_batching(served: tuple[Stack, list[Any]]) -> None:
    stack, _answers = served
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(
            pool.map(
                lambda _: call(
                    stack.http_port,
                    "POST",
                    f"/wfpredict/{archives.BATCHED}",
                    archives.BODY,
                    {"Content-Type": "application/json"},
                ),
                range(48),
            )
        )
    assert {(status, body) for status, _type, body in answers} == {(200, b"[\n  2.0,\n  4.0,\n  6.0\n]")}
    client = stack.redis()
    try:
        sizes = cast(
            dict[bytes, bytes], client.hgetall(f"sluice:{{{archives.BATCHED}__double:1.0}}:batch-sizes")
        )
    finally:
        client.close()
    assert max(int(size) for size in sizes) > 1, sizes


def test_a_members_worker_killed_mid_call_costs_no_answer(served: tuple[Stack, list[Any]]) -> None:
    stack, _answers = served
    (victim,) = stack.worker_pids("seq__double").values()

    def predict(index: int) -> tuple[int, bytes]:
        if index == 8:
            os.kill(victim, signal.SIGKILL)
        status, _type, body = call(stack.http_port, "POST", "/wfpredict/seq", archives.BODY,
                                   {"Content-Type": "application/json"})  # fmt: skip
        return status, body

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(predict, range(32)))
    assert answers == [(200, SEQ_ANSWER)] * 32, f"after {time.monotonic() - started:.1f} s"
    stack.wait_for_workers("seq__double", 1, exclude={victim})


def test_registration_is_refused_while_the_model_api_is_off(tmp_path: Path) -> None:
    stack = Stack.create(tmp_path)
    archives.build_store(stack.store)
    stack.start([])
    try:
        refused = {"code": 405, "type": "MethodNotAllowedException", "message": "Model API disabled"}
        for method, path in (
            ("POST", f"/workflows?url={archives.SEQ}.war"),
            ("DELETE", f"/workflows/{archives.SEQ}"),
        ):
            status, _type, body = call(stack.management_http_port, method, path)
            assert (status, json.loads(body)) == (405, refused)
        assert json.loads(call(stack.management_http_port, "GET", "/workflows")[2]) == {"workflows": []}
    finally:
        stack.stop()
