"""BYTES round trips through real workers, on every transport of the real gateway: a handler returning
its BYTES input unchanged gives the client its bytes back, UTF-8 or not, in both handler modes (OIP JSON
and tensors), over gRPC (raw and typed), REST JSON, REST binary data, and binary in / JSON asked out."""

import json
import struct
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import grpc
import pytest
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings
from tests.support import kserve_models, stack
from tests.support.redis_server import RedisServer

MODELS = {"echo_json": kserve_models.echo_json_model, "echo_tensors": kserve_models.echo_tensors_model}
ELEMENTS = [b"hello", "wörld".encode(), b"\xff\x00\x80"]
# What the OIP JSON handler is given for ELEMENTS: text as text, the rest marked base64.
SEEN = ["hello", "wörld", {"b64": "/wCA"}]


def framed(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def elements_of(raw: bytes) -> list[bytes]:
    items = []
    while raw:
        (length,) = struct.unpack_from("<I", raw)
        items.append(raw[4 : 4 + length])
        raw = raw[4 + length :]
    return items


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    root = tmp_path_factory.mktemp("bytes")
    server = RedisServer(root / "redis")
    server.start()
    started: list[stack.Service] = []
    try:
        running = stack.serve_models(server.url, MODELS, root)
        started += running.values()
        stack.wait_workers_ready(server.url, running)
        yield server
    finally:
        for worker in started:
            worker.stop()
        server.kill()


@pytest.fixture
async def gateway(workers: RedisServer) -> AsyncIterator[Gateway]:
    gw = Gateway(make_settings(workers.url))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(grace_s=0)


@pytest.fixture
async def stub(gateway: Gateway) -> AsyncIterator["GRPCInferenceServiceAsyncStub"]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        yield GRPCInferenceServiceStub(channel)


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{gateway.rest_port}") as session:
        yield session


@pytest.mark.parametrize("model", list(MODELS))
async def test_grpc_raw_bytes_round_trip(stub: "GRPCInferenceServiceAsyncStub", model: str) -> None:
    request = pb.ModelInferRequest(model_name=model, raw_input_contents=[framed(ELEMENTS)])
    request.inputs.add(name="s", datatype="BYTES", shape=[1, 3])
    response = await stub.ModelInfer(request, timeout=30)
    outputs = dict(zip([o.name for o in response.outputs], response.raw_output_contents, strict=True))
    assert [(o.datatype, list(o.shape)) for o in response.outputs if o.name == "OUT_s"] == [("BYTES", [1, 3])]
    assert outputs["OUT_s"] == framed(ELEMENTS)
    if model == "echo_json":
        assert json.loads(elements_of(outputs["SEEN"])[0]) == {"s": SEEN}


@pytest.mark.parametrize("model", list(MODELS))
async def test_grpc_typed_bytes_round_trip(stub: "GRPCInferenceServiceAsyncStub", model: str) -> None:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="s", datatype="BYTES", shape=[3]).contents.bytes_contents.extend(ELEMENTS)
    request.outputs.add(name="OUT_s")
    request.parameters["binary_data_output"].bool_param = False
    response = await stub.ModelInfer(request, timeout=30)
    assert not response.raw_output_contents
    assert list(response.outputs[0].contents.bytes_contents) == ELEMENTS


async def post(http: aiohttp.ClientSession, model: str, header: dict[str, Any], binary: bytes = b"") -> Any:
    """POST a v2 infer request; returns the JSON part and the binary outputs by name."""
    encoded = json.dumps(header).encode()
    headers = {"Inference-Header-Content-Length": str(len(encoded))} if binary else {}
    async with http.post(f"/v2/models/{model}/infer", data=encoded + binary, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        body = await resp.read()
        length = int(resp.headers.get("Inference-Header-Content-Length", len(body)))
    document, rest, blobs = json.loads(body[:length]), body[length:], {}
    for output in document["outputs"]:
        size = output.get("parameters", {}).get("binary_data_size")
        if size is not None:
            blobs[output["name"]], rest = rest[:size], rest[size:]
    return document, blobs


@pytest.mark.parametrize("model", list(MODELS))
async def test_rest_json_strings_reach_the_handler_as_sent_and_come_back(
    http: aiohttp.ClientSession, model: str
) -> None:
    texts = ["hello", "wörld", ""]
    header = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [3], "data": texts}]}
    document, blobs = await post(http, model, header)
    outputs = {o["name"]: o for o in document["outputs"]}
    assert blobs == {}
    assert outputs["OUT_s"] == {"name": "OUT_s", "datatype": "BYTES", "shape": [3], "data": texts}
    if model == "echo_json":
        assert json.loads(outputs["SEEN"]["data"][0]) == {"s": texts}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("binary_output", [True, False])
async def test_rest_binary_bytes_round_trip(
    http: aiohttp.ClientSession, model: str, binary_output: bool
) -> None:
    raw = framed(ELEMENTS)
    header = {
        "inputs": [
            {"name": "s", "datatype": "BYTES", "shape": [3], "parameters": {"binary_data_size": len(raw)}}
        ],
        "outputs": [{"name": "OUT_s", "parameters": {"binary_data": binary_output}}],
    }
    document, blobs = await post(http, model, header, raw)
    # Asked for JSON or not, an output JSON cannot hold comes back as binary data, byte for byte.
    (output,) = document["outputs"]
    assert output["parameters"] == {"binary_data_size": len(raw)}
    assert blobs == {"OUT_s": raw}


async def test_rest_refuses_bytes_data_that_are_not_strings(http: aiohttp.ClientSession) -> None:
    header = {"inputs": [{"name": "s", "datatype": "BYTES", "shape": [2], "data": ["ok", 5]}]}
    async with http.post("/v2/models/echo_json/infer", json=header) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error.startswith("unable to parse 'data' of input 's' as BYTES: element 1 is not a string")
