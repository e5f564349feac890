"""Stateful models as a TorchServe user meets them: ``sluice start`` with an archive whose
model-config.yaml turns on sequenceBatching, two workers, and clients on StreamPredictions2,
Predictions, REST and KServe v2. Every answer of a sequence comes from one worker, in order; a
worker killed mid-sequence moves its sequences with their saved states, or fails them clearly."""

import json
import os
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from sluice.v1 import kserve_pb2 as kpb
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub

from tests.support.cli_stack import Stack
from tests.support.models import sequence_model, write_mar

CALL_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Stopping workers hand unsaved sequences over after 2 s (the default waits up to 20 s for them).
    started = Stack.create(tmp_path_factory.mktemp("sequences"), "sluice_sequence_drain_s=2\n")
    for spec in (sequence_model("acc", save_state=False), sequence_model("keeper", save_state=True)):
        write_mar(spec, started.store)
    started.start(["acc.mar", "keeper.mar"])
    try:
        started.wait_for_workers("acc", 2)
        started.wait_for_workers("keeper", 2)
        yield started
    finally:
        started.stop()


def stream2(stack: Stack, requests: list[pb.PredictionsRequest]) -> list[pb.PredictionResponse]:
    with grpc.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        return list(stub.StreamPredictions2(iter(requests), timeout=CALL_TIMEOUT_S))


def step(model_name: str, sid: str, value: int) -> pb.PredictionsRequest:
    return pb.PredictionsRequest(model_name=model_name, sequence_id=sid, input={"data": str(value).encode()})


def answer(response: pb.PredictionResponse) -> dict[str, Any]:
    assert not response.HasField("status"), response.status
    parsed: dict[str, Any] = json.loads(response.prediction)
    return parsed


def test_sequences_sharing_one_bidi_stream_are_answered_in_order_each_by_one_worker(stack: Stack) -> None:
    steps, count = 5, 8
    requests = [step("acc", f"bidi-{n}", s * (n + 1)) for s in range(1, steps + 1) for n in range(count)]
    responses = stream2(stack, requests)
    assert len(responses) == steps * count
    by_sequence: dict[str, list[dict[str, Any]]] = {}
    for response in responses:
        answered = answer(response)
        assert response.sequence_id == answered["sequence"]
        by_sequence.setdefault(response.sequence_id, []).append(answered)
    for n in range(count):
        answers = by_sequence[f"bidi-{n}"]
        assert [a["total"] for a in answers] == [(n + 1) * s * (s + 1) // 2 for s in range(1, steps + 1)]
        assert len({a["pid"] for a in answers}) == 1
    assert len({a[0]["pid"] for a in by_sequence.values()}) == 2, "sequences should spread over both workers"


def test_a_request_without_a_sequence_id_gets_torchserves_in_stream_error_and_the_stream_goes_on(
    stack: Stack,
) -> None:
    responses = stream2(
        stack,
        [pb.PredictionsRequest(model_name="acc", input={"data": b"1"}), step("acc", "after-error", 2)],
    )
    assert len(responses) == 2
    [error] = [r for r in responses if r.HasField("status")]
    assert (error.status.code, error.status.message) == (13, "Parameter sequenceId is required.")
    assert answer(next(r for r in responses if not r.HasField("status")))["total"] == 2


def test_predictions_joins_the_sequence_its_request_names_and_refuses_one_without(stack: Stack) -> None:
    with grpc.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        totals = [
            json.loads(stub.Predictions(step("acc", "unary", value), timeout=CALL_TIMEOUT_S).prediction)[
                "total"
            ]
            for value in (3, 4)
        ]
        assert totals == [3, 7]
        unnamed = pb.PredictionsRequest(model_name="acc", input={"data": b"1"})
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predictions(unnamed, timeout=CALL_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith("Parameter sequenceId is required.")


def _run_then_kill_holder(stack: Stack, model_name: str, sid: str) -> tuple[list[dict[str, Any]], int]:
    before = [answer(r) for r in stream2(stack, [step(model_name, sid, v) for v in (1, 2, 3)])]
    holder = before[0]["pid"]
    assert holder in stack.worker_pids(model_name).values()
    os.kill(holder, signal.SIGKILL)
    return before, holder


def test_a_killed_workers_sequence_goes_on_from_its_saved_state(stack: Stack) -> None:
    before, holder = _run_then_kill_holder(stack, "keeper", "survivor")
    assert [a["total"] for a in before] == [1, 3, 6]
    [after] = stream2(stack, [step("keeper", "survivor", 4)])
    moved = answer(after)
    assert moved["total"] == 10
    assert moved["pid"] != holder
    stack.wait_for_workers("keeper", 2, exclude={holder})


def test_a_killed_workers_unsaved_sequence_fails_clearly_and_new_ones_are_served(stack: Stack) -> None:
    _, holder = _run_then_kill_holder(stack, "acc", "orphan")
    [lost] = stream2(stack, [step("acc", "orphan", 4)])
    assert lost.HasField("status")
    assert lost.status.message == "sequence state lost: worker died"
    assert lost.status.code == grpc.StatusCode.ABORTED.value[0]
    [fresh] = stream2(stack, [step("acc", "newcomer", 5)])
    assert answer(fresh)["total"] == 5
    stack.wait_for_workers("acc", 2, exclude={holder})


def rest(stack: Stack, model_name: str, body: bytes, headers: dict[str, str]) -> tuple[dict[str, Any], Any]:
    headers = {"content-type": "text/plain", **headers}
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.http_port}/predictions/{model_name}",
        data=body,
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
        return json.loads(response.read()), response.headers


def test_rest_joins_a_sequence_by_header_and_makes_one_when_none_is_named(stack: Stack) -> None:
    first, headers = rest(stack, "acc", b"5", {})
    sid = headers["ts_request_sequence_id"]
    assert sid.startswith("ts-seq-")
    assert (first["sequence"], first["total"], first["start"]) == (sid, 5, True)
    second, _ = rest(stack, "acc", b"6", {"ts_request_sequence_id": sid})
    assert second["total"] == 11
    ended, _ = rest(stack, "acc", b"1", {"ts_request_sequence_id": sid, "ts_request_sequence_end": "true"})
    assert (ended["total"], ended["end"]) == (12, True)
    with pytest.raises(urllib.error.HTTPError) as closed:
        rest(stack, "acc", b"1", {"ts_request_sequence_id": sid})
    assert closed.value.code == 503
    assert "closed, or expired" in json.loads(closed.value.read())["message"]


def v2_infer(stack: Stack, value: int, **parameters: Any) -> kpb.ModelInferResponse:
    request = kpb.ModelInferRequest(model_name="acc")
    tensor = request.inputs.add(name="data", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.append(str(value).encode())
    for key, given in parameters.items():
        if isinstance(given, bool):
            request.parameters[key].bool_param = given
        elif isinstance(given, int):
            request.parameters[key].int64_param = given
        else:
            request.parameters[key].string_param = given
    with grpc.insecure_channel(stack.grpc_target) as channel:
        reply: kpb.ModelInferResponse = GRPCInferenceServiceStub(channel).ModelInfer(
            request, timeout=CALL_TIMEOUT_S
        )
        return reply


def v2_total(reply: kpb.ModelInferResponse) -> int:
    """The handler's answer (a JSON string) as Sluice returns it over v2: one BYTES output."""
    [output] = reply.outputs
    raw = (
        output.contents.bytes_contents[0]
        if output.contents.bytes_contents
        else reply.raw_output_contents[0][4:]
    )
    total: int = json.loads(raw)["total"]
    return total


def test_kserve_v2_sequences_follow_tritons_start_and_end_flags(stack: Stack) -> None:
    with pytest.raises(grpc.RpcError) as missing:
        v2_infer(stack, 1)
    assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert missing.value.details() == (
        "inference request to model 'acc' must specify a non-zero or non-empty correlation ID"
    )
    with pytest.raises(grpc.RpcError) as unstarted:
        v2_infer(stack, 1, sequence_id=4242)
    assert unstarted.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must specify the START flag" in (unstarted.value.details() or "")
    totals = [
        v2_total(v2_infer(stack, 2, sequence_id=4242, sequence_start=True)),
        v2_total(v2_infer(stack, 3, sequence_id=4242)),
        v2_total(v2_infer(stack, 4, sequence_id=4242, sequence_end=True)),
    ]
    assert totals == [2, 5, 9]
    with pytest.raises(grpc.RpcError) as ended:
        v2_infer(stack, 1, sequence_id=4242)
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
