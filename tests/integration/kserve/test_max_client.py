"""Modular MAX's KServe gRPC example client, as its README writes it, against a model served by Sluice
(a gateway and a real worker as processes): ``ModelInfer`` and ``ModelInferStream`` with
``model_version="0"``, the prompt as ``int_contents`` code points (no datatype or shape), a
``max_tokens`` string parameter, and the answer read from ``outputs[0].contents.int_contents``."""

import time
from collections.abc import Iterator

import grpc
import pytest
from sluice.v1 import kserve_pb2 as infer_pb2
from sluice.v1 import kserve_pb2_grpc as infer_grpc

from tests.support import kserve_models, stack
from tests.support.redis_server import RedisServer

MODEL = "max_chat"  # registered as version "1.0", its default


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("max-client")
    server = RedisServer(root / "redis")
    server.start()
    services: list[stack.Service] = []
    try:
        stack.register(server.url, kserve_models.max_chat_model(MODEL), root)
        worker = stack.start_worker(server.url, MODEL, "1.0", root / "logs")
        services.append(worker)
        gateway, port = stack.start_gateway(server.url, root / "logs")
        services.append(gateway)
        stack.wait_workers_ready(server.url, {MODEL: worker})
        _wait_live(f"127.0.0.1:{port}", gateway)
        yield f"127.0.0.1:{port}"
    finally:
        for service in services:
            service.stop()
        server.kill()


def _wait_live(address: str, gateway: stack.Service, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = infer_grpc.GRPCInferenceServiceStub(channel)
        while time.monotonic() < deadline:
            assert gateway.alive(), gateway.log()
            try:
                if stub.ServerLive(infer_pb2.ServerLiveRequest(), timeout=1).live:
                    return
            except grpc.RpcError:
                time.sleep(0.1)
    raise AssertionError(f"gateway not live:\n{gateway.log()}")


# The client, as MAX's README writes it (its request builder and ascii_to_string).
def create_request(text: str, max_tokens: str) -> infer_pb2.ModelInferRequest:
    response_contents = infer_pb2.InferTensorContents(int_contents=[ord(i) for i in text])
    prompt_entry = infer_pb2.ModelInferRequest.InferInputTensor(name="prompt", contents=response_contents)
    return infer_pb2.ModelInferRequest(
        model_name=MODEL,
        model_version="0",
        parameters={"max_tokens": infer_pb2.InferParameter(string_param=max_tokens)},
        inputs=[prompt_entry],
    )


def ascii_to_string(codes: list[int]) -> str:
    return "".join(chr(code) for code in codes)


def test_model_infer_as_maxs_example_calls_it(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = infer_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(create_request("What is life?", "500"), timeout=60)
        assert ascii_to_string(list(response.outputs[0].contents.int_contents)) == "You asked: What is life?"
        # max_tokens reaches the handler (it cuts the answer).
        response = stub.ModelInfer(create_request("What is life?", "8"), timeout=60)
        assert ascii_to_string(list(response.outputs[0].contents.int_contents)) == "You aske"
        assert (response.model_name, response.model_version) == (MODEL, "1.0")


def test_model_infer_stream_as_maxs_example_calls_it(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = infer_grpc.GRPCInferenceServiceStub(channel)
        text = ""
        for response in stub.ModelInferStream(create_request("Why?", "500"), timeout=60):
            text += ascii_to_string(list(response.outputs[0].contents.int_contents))
        assert text == "You asked: Why?"


def test_a_v2_client_naming_version_0_gets_the_default_version(address: str) -> None:
    # The same prompt with the v2 protocol's datatype and shape: raw contents come back, as to any
    # v2 request that does not set binary_data_output.
    codes = [ord(c) for c in "Hi"]
    request = infer_pb2.ModelInferRequest(
        model_name=MODEL,
        model_version="0",
        parameters={"max_tokens": infer_pb2.InferParameter(string_param="500")},
        inputs=[
            infer_pb2.ModelInferRequest.InferInputTensor(
                name="prompt",
                datatype="INT32",
                shape=[len(codes)],
                contents=infer_pb2.InferTensorContents(int_contents=codes),
            )
        ],
    )
    with grpc.insecure_channel(address) as channel:
        stub = infer_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(request, timeout=60)
        [output] = response.outputs
        assert (output.name, output.datatype, list(output.shape)) == ("response", "INT32", [13])
        assert response.raw_output_contents[0] == b"".join(
            ord(c).to_bytes(4, "little") for c in "You asked: Hi"
        )
        assert stub.ModelReady(infer_pb2.ModelReadyRequest(name=MODEL, version="0"), timeout=10).ready
        metadata = stub.ModelMetadata(infer_pb2.ModelMetadataRequest(name=MODEL, version="0"), timeout=10)
        assert list(metadata.versions) == ["1.0"]
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(infer_pb2.ModelInferRequest(model_name=MODEL, model_version="2"), timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
