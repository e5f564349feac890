"""tritonclient.grpc, unchanged, against Sluice's KServe v2 gRPC: the gateway and real workers run as
subprocesses against a test redis-server; models are registered with plain Redis commands and JSON.
This tier never imports Sluice's generated modules (tritonclient declares the same `inference`
package; shared/research/kserve_v2.md 1.5)."""

import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.compat.triton_ready import wait_ready
from tests.support import kserve_models, stack
from tests.support.redis_server import RedisServer

MODELS = {
    "add_one": kserve_models.add_one_model,
    "echo_json": kserve_models.echo_json_model,
    "echo_tensors": kserve_models.echo_tensors_model,
    "streamer": kserve_models.streamer_model,
}
SAMPLES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], dtype=np.uint8),
    "UINT16": np.array([[0, 7, 65535]], dtype=np.uint16),
    "UINT32": np.array([[0, 7, 2**32 - 1]], dtype=np.uint32),
    "UINT64": np.array([[0, 7, 2**64 - 1]], dtype=np.uint64),
    "INT8": np.array([[-128, 7, 127]], dtype=np.int8),
    "INT16": np.array([[-32768, 7, 32767]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 7, 2**31 - 1]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 7, 2**63 - 1]], dtype=np.int64),
    "FP16": np.array([[0.5, -2.0, 65504.0]], dtype=np.float16),
    "FP32": np.array([[0.5, -2.0, 3.25]], dtype=np.float32),
    "FP64": np.array([[0.5, -2.0, 1e300]], dtype=np.float64),
    "BYTES": np.array([[b"", b"abc", b"\x00\xff"]], dtype=np.object_),
    "BF16": np.array([[0.5, -2.0, 3.0]], dtype=ml_dtypes.bfloat16),
}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("stack")
    server = RedisServer(root / "redis")
    server.start()
    services: list[stack.Service] = []
    try:
        workers = stack.serve_models(server.url, MODELS, root)
        services += workers.values()
        gateway, port = stack.start_gateway(server.url, root / "logs")
        services.append(gateway)
        stack.wait_workers_ready(server.url, workers)
        stack.startup_done(server.url, [(name, "1.0", 1) for name in MODELS])
        wait_ready(f"127.0.0.1:{port}", gateway)
        yield f"127.0.0.1:{port}"
    finally:
        for service in services:
            service.stop()
        server.kill()


@pytest.fixture
def client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(url)
    try:
        yield client
    finally:
        client.close()


def _input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    datatype = "BYTES" if array.dtype == np.object_ else grpcclient.np_to_triton_dtype(array.dtype)
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _error(call: Any, *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call(*args, **kwargs)
    return caught.value


def test_health_and_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "sluice"
    assert metadata["extensions"] == ["model_configuration", "statistics", "parameters", "generate"]
    assert client.is_model_ready("add_one")


def test_model_metadata_and_config(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("add_one", as_json=True)
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "4"]}]
    assert [o["name"] for o in metadata["outputs"]] == ["OUTPUT0", "PARAMS"]
    config = client.get_model_config("add_one", as_json=True)["config"]
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}]
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    streamer = client.get_model_config("streamer", as_json=True)["config"]
    assert streamer["model_transaction_policy"] == {"decoupled": True}


def test_every_datatype_round_trips(client: grpcclient.InferenceServerClient) -> None:
    inputs = [_input(name, array) for name, array in SAMPLES.items()]
    result = client.infer("echo_tensors", inputs, request_id="all-types")
    assert result.get_response().id == "all-types"
    for name, array in SAMPLES.items():
        got = result.as_numpy(f"OUT_{name}")
        if name == "BF16":  # a numpy handler sees BF16 as float32 and answers FP32
            np.testing.assert_array_equal(got, array.astype(np.float32))
        else:
            assert got.dtype == array.dtype, name
            assert got.tolist() == array.tolist(), name


@pytest.mark.parametrize("model", ["echo_json", "echo_tensors"])
def test_bytes_echo_gives_back_every_byte(client: grpcclient.InferenceServerClient, model: str) -> None:
    texts = np.array([["hello", "wörld", b"\xff\x00\x80"]], dtype=np.object_)
    result = client.infer(model, [_input("TXT", texts)])
    assert result.as_numpy("OUT_TXT").tolist() == [[b"hello", "wörld".encode(), b"\xff\x00\x80"]]
    if model == "echo_json":  # the OIP handler saw text as text, other bytes marked
        seen = json.loads(result.as_numpy("SEEN")[0])
        assert seen == {"TXT": ["hello", "wörld", {"b64": "/wCA"}]}


def test_add_one_with_parameters_priority_timeout_and_requested_outputs(
    client: grpcclient.InferenceServerClient,
) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = client.infer(
        "add_one",
        [_input("INPUT0", x)],
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0")],
        priority=1,
        timeout=10_000_000,
        parameters={"temperature": 0.5, "name": "x"},
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    assert result.as_numpy("PARAMS") is None
    response = result.get_response(as_json=True)
    assert (response["model_name"], response["model_version"]) == ("add_one", "1.0")


def test_large_tensors(url: str) -> None:
    big = grpcclient.InferenceServerClient(
        url, channel_args=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    )
    try:
        x = np.random.default_rng(0).random(9 * 1024 * 1024, dtype=np.float32)  # 36 MiB
        result = big.infer("echo_tensors", [_input("x", x)], client_timeout=120)
        np.testing.assert_array_equal(result.as_numpy("OUT_x"), x)
    finally:
        big.close()


def test_streaming_with_callbacks(client: grpcclient.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer("streamer", [], request_id="a", parameters={"chunks": 2})
        client.async_stream_infer(
            "streamer",
            [],
            request_id="b",
            parameters={"chunks": 1, "empty_final": True},
            enable_empty_final_response=True,
        )
        client.async_stream_infer("nope", [], request_id="lost")
        client.async_stream_infer(
            "add_one", [_input("INPUT0", np.zeros((1, 5), np.float32))], request_id="bad"
        )
    finally:
        client.stop_stream()
    seen: dict[str, list[tuple[Any, bool]]] = {}
    errors = []
    while not results.empty():
        result, error = results.get_nowait()
        if error is not None:
            errors.append(str(error))
            continue
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        chunk = result.as_numpy("CHUNK")
        seen.setdefault(response.id, []).append((None if chunk is None else int(chunk[0]), final))
    assert seen == {"a": [(0, False), (1, False), (-1, True)], "b": [(0, False), (None, True)]}
    assert len(errors) == 2
    assert any("Model not found: nope" in e for e in errors)
    assert any("unexpected shape for input 'INPUT0' for model 'add_one'" in e for e in errors)


def test_errors(client: grpcclient.InferenceServerClient) -> None:
    error = _error(client.infer, "nope", [_input("INPUT0", np.zeros((1, 4), np.float32))])
    assert error.status() == "StatusCode.NOT_FOUND"
    error = _error(client.infer, "add_one", [_input("INPUT0", np.zeros((1, 4), np.int32))])
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'INT32', but model 'add_one' expects 'FP32'" in error.message()
    error = _error(client.infer, "streamer", [])
    assert error.status() == "StatusCode.UNIMPLEMENTED"
    assert _error(client.get_model_metadata, "nope").status() == "StatusCode.NOT_FOUND"
    assert _error(client.load_model, "add_one").status() == "StatusCode.UNIMPLEMENTED"
    assert _error(client.get_system_shared_memory_status).status() == "StatusCode.UNIMPLEMENTED"


def test_statistics_and_repository_index(client: grpcclient.InferenceServerClient) -> None:
    client.infer("add_one", [_input("INPUT0", np.zeros((3, 4), np.float32))])
    stats = client.get_inference_statistics("add_one", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) >= 3
    assert int(stats["inference_stats"]["success"]["count"]) >= 1
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {(m["name"], m["state"]) for m in index} == {(name, "READY") for name in MODELS}


def test_proto_field_numbers_match_tritonclients(tmp_path: Path) -> None:
    """Every message and rpc of our kserve.proto against tritonclient's independently generated
    descriptors (grpc_service.proto + model_config.proto): same names, numbers, types and labels."""
    from google.protobuf import descriptor_pb2
    from tritonclient.grpc import model_config_pb2, service_pb2

    from tests.compat.proto_descriptors import compile_descriptor, message_fields, methods

    ours = compile_descriptor("sluice/v1/kserve.proto", tmp_path)
    theirs: dict[str, descriptor_pb2.DescriptorProto] = {}
    for module in (service_pb2, model_config_pb2):
        file = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file)
        theirs.update({message.name: message for message in file.message_type})
    for message in ours.message_type:
        ours_fields, theirs_fields = message_fields(message), message_fields(theirs[message.name])
        for key, value in ours_fields.items():
            assert theirs_fields.get(key) == value, (message.name, key)
    triton = descriptor_pb2.FileDescriptorProto()
    service_pb2.DESCRIPTOR.CopyToProto(triton)
    ours_methods = methods(ours)
    assert methods(triton).items() <= ours_methods.items()
    assert ours_methods["ModelInferStream"] == (
        ".inference.ModelInferRequest",
        ".inference.ModelInferResponse",
        False,
        True,
    )


def test_proto_messages_match_torchserves_open_inference_proto(tmp_path: Path) -> None:
    """TorchServe's own OIP proto (from its jar): its six rpcs and every field, wire-identical in ours."""
    import zipfile

    from tests.compat.proto_descriptors import compile_descriptor, message_fields, methods
    from tests.compat.torchserve_protos import jar_path

    with zipfile.ZipFile(jar_path()) as jar:
        jar.extract("proto/open_inference_grpc.proto", tmp_path / "ts")
    theirs = compile_descriptor("open_inference_grpc.proto", tmp_path, include=tmp_path / "ts" / "proto")
    ours = compile_descriptor("sluice/v1/kserve.proto", tmp_path)
    ours_messages = {m.name: message_fields(m) for m in ours.message_type}
    for message in theirs.message_type:
        for key, value in message_fields(message).items():
            assert ours_messages[message.name].get(key) == value, (message.name, key)
    their_methods = {
        name: (kinds[0].rsplit(".", 1)[-1], kinds[1].rsplit(".", 1)[-1], *kinds[2:])
        for name, kinds in methods(theirs).items()
    }
    our_methods = {
        name: (kinds[0].rsplit(".", 1)[-1], kinds[1].rsplit(".", 1)[-1], *kinds[2:])
        for name, kinds in methods(ours).items()
    }
    assert their_methods.items() <= our_methods.items()
