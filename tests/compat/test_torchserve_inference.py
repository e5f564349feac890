"""TorchServe's own inference client against Sluice: stubs generated from the protos in the
torchserve 0.12.0 jar, an archive made by the real torch-model-archiver, the stack started by
`sluice start`. Ping, Predictions, StreamPredictions and StreamPredictions2 as TorchServe documents
them (shared/research/torchserve.md §10 items 1-6, 12, 14)."""

import json
import queue
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import grpc
import pytest
from google.protobuf import empty_pb2
from google.rpc import error_details_pb2

from tests.compat.torchserve_protos import compile_stubs, load
from tests.support.cli_stack import Stack

ARCHIVER = Path(sys.executable).parent / "torch-model-archiver"
# TorchServe's reference client sends these on every call (ts_scripts/torchserve_grpc_client.py).
CLIENT_METADATA = (("protocol", "gRPC"), ("session_id", "12345"))

HANDLER = textwrap.dedent("""
    from ts.handler_utils.utils import send_intermediate_predict_response


    def handle(data, context):
        if data is None:
            return None
        out = []
        for idx, row in enumerate(data):
            text = bytes(row["data"]).decode()
            if text.startswith("stream:"):
                for i in range(int(text.split(":")[1])):
                    chunk = [f"chunk-{i}"]
                    send_intermediate_predict_response(chunk, context.request_ids, "ok", 200, context)
                out.append("final")
            elif text == "json":
                out.append({"a": 1, "b": [1, 2]})
            elif text == "sequence":
                out.append(context.get_sequence_id(idx) or "none")
            else:
                out.append(bytes(row["data"]))
        return out
""").lstrip()


def archive_with_the_real_archiver(out: Path) -> None:
    source = out.parent / "source"
    source.mkdir()
    (source / "echo_handler.py").write_text(HANDLER)
    subprocess.run(
        [
            str(ARCHIVER), "--model-name", "echo", "--version", "1.0",
            "--handler", str(source / "echo_handler.py"), "--export-path", str(out),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    generated = compile_stubs(tmp_path_factory.mktemp("torchserve-protos"))
    return load(generated, "inference_pb2"), load(generated, "inference_pb2_grpc")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    built = Stack.create(tmp_path_factory.mktemp("ts-compat"))
    archive_with_the_real_archiver(built.store)
    assert (built.store / "echo.mar").exists()
    built.start(["echo=echo.mar"])
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture(scope="module")
def client(stack: Stack, stubs: tuple[ModuleType, ModuleType]) -> Iterator[object]:
    with grpc.insecure_channel(stack.grpc_target) as channel:
        yield stubs[1].InferenceAPIsServiceStub(channel)


def test_ping_is_torchserve_health_json(client: object) -> None:
    reply = client.Ping(empty_pb2.Empty(), metadata=CLIENT_METADATA, timeout=10)  # type: ignore[attr-defined]
    assert reply.health == '{\n  "status": "Healthy"\n}'


def test_predictions_bytes_and_json_as_torchserve_serializes(
    client: object, stubs: tuple[ModuleType, ...]
) -> None:
    pb = stubs[0]
    reply = client.Predictions(  # type: ignore[attr-defined]
        pb.PredictionsRequest(model_name="echo", input={"data": b"\x00\x01raw"}),
        metadata=CLIENT_METADATA,
        timeout=30,
    )
    assert reply.prediction == b"\x00\x01raw"
    reply = client.Predictions(  # type: ignore[attr-defined]
        pb.PredictionsRequest(model_name="echo", model_version="1.0", input={"data": b"json"}), timeout=30
    )
    assert reply.prediction == json.dumps({"a": 1, "b": [1, 2]}, indent=2).encode()


def test_unknown_model_names_it(client: object, stubs: tuple[ModuleType, ...]) -> None:
    with pytest.raises(grpc.RpcError) as info:
        client.Predictions(stubs[0].PredictionsRequest(model_name="nope", input={"data": b"x"}), timeout=10)  # type: ignore[attr-defined]
    assert info.value.code() is grpc.StatusCode.NOT_FOUND
    assert (info.value.details() or "").startswith("Model not found: nope")


def test_stream_predictions_yields_each_intermediate_then_the_final(
    client: object, stubs: tuple[ModuleType, ...]
) -> None:
    request = stubs[0].PredictionsRequest(model_name="echo", input={"data": b"stream:3"})
    replies = list(client.StreamPredictions(request, metadata=CLIENT_METADATA, timeout=30))  # type: ignore[attr-defined]
    assert [r.prediction for r in replies] == [b"chunk-0", b"chunk-1", b"chunk-2", b"final"]


def test_stream_predictions_without_intermediate_sends_one_message_then_ok(
    client: object, stubs: tuple[ModuleType, ...]
) -> None:
    request = stubs[0].PredictionsRequest(model_name="echo", input={"data": b"plain"})
    replies = list(client.StreamPredictions(request, timeout=30))  # type: ignore[attr-defined]
    assert [r.prediction for r in replies] == [b"plain"]


def test_stream_predictions2_answers_in_stream_and_keeps_it_open(
    client: object, stubs: tuple[ModuleType, ...]
) -> None:
    pb = stubs[0]
    requests: queue.Queue[object] = queue.Queue()
    requests.put(pb.PredictionsRequest(model_name="echo", sequence_id="seq-1", input={"data": b"sequence"}))
    requests.put(pb.PredictionsRequest(model_name="echo", input={"data": b"no sequence id"}))
    requests.put(pb.PredictionsRequest(model_name="echo", sequence_id="seq-1", input={"data": b"after"}))
    requests.put(None)
    responses = list(client.StreamPredictions2(iter(requests.get, None), timeout=30))  # type: ignore[attr-defined]
    # One response per request; an in-stream error does not wait for the jobs admitted before it.
    assert len(responses) == 3
    errors = [r for r in responses if r.HasField("status")]
    assert [r.prediction for r in responses if not r.HasField("status")] == [b"seq-1", b"after"]
    assert len(errors) == 1
    assert errors[0].status.code == 13
    assert errors[0].status.message == "Parameter sequenceId is required."
    info = error_details_pb2.ErrorInfo()
    assert errors[0].status.details[0].Unpack(info)
