"""KServe v2 REST against the real gateway with a scripted worker that answers ModelInferRequests
(the same job the gRPC transport sends): JSON tensors, the binary tensor data extension, metadata,
health, and {"error": ...} bodies."""

import json
import struct
from collections.abc import AsyncIterator

import aiohttp
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply, WireProtocol
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.v1 import kserve_pb2 as pb

from tests.integration.gateway.conftest import register

TENSORS = ModelTensors(
    inputs=(
        TensorSpec(name="IN", datatype="FP32", shape=(3,)),
        TensorSpec(name="TXT", datatype="BYTES", shape=(-1,)),
    ),
    outputs=(
        TensorSpec(name="OUT", datatype="FP32", shape=(3,)),
        TensorSpec(name="ECHO", datatype="BYTES", shape=(-1,)),
    ),
    max_batch_size=4,
)


async def doubler(job: Job) -> AsyncIterator[Reply]:
    """OUT = 2 * IN (FP32), ECHO = TXT; raw outputs, as the worker codec answers."""
    assert job.protocol == WireProtocol.KSERVE
    request = pb.ModelInferRequest.FromString(job.request)
    (shape_in, raw_in), (shape_txt, raw_txt) = [
        (list(t.shape), r) for t, r in zip(request.inputs, request.raw_input_contents, strict=True)
    ]
    values = struct.unpack(f"<{len(raw_in) // 4}f", raw_in)
    response = pb.ModelInferResponse(
        model_name=job.model_name,
        model_version=job.model_version,
        id=request.id,
        outputs=[
            pb.ModelInferResponse.InferOutputTensor(name="OUT", datatype="FP32", shape=shape_in),
            pb.ModelInferResponse.InferOutputTensor(name="ECHO", datatype="BYTES", shape=shape_txt),
        ],
        raw_output_contents=[struct.pack(f"<{len(values)}f", *(2 * v for v in values)), raw_txt],
    )
    yield Reply(
        job_id=job.job_id, final=True, status_code=200, payload=response.SerializeToString(), attempt=1
    )


@pytest.fixture
async def served(redis_client: aioredis.Redis, responder) -> None:  # type: ignore[no-untyped-def]
    await register(redis_client, tensors=TENSORS)
    await responder(doubler)


def json_request(**extra: object) -> dict[str, object]:
    return {
        "id": "r1",
        "inputs": [
            {"name": "IN", "datatype": "FP32", "shape": [1, 3], "data": [[1.0, 2.5, -3.0]]},
            {"name": "TXT", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "héllo"]},
        ],
        **extra,
    }


async def test_json_tensors(http: aiohttp.ClientSession, served: None) -> None:
    async with http.post("/v2/models/echo/infer", json=json_request()) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("application/json")
        body = await resp.json()
    assert body == {
        "model_name": "echo",
        "model_version": "1.0",
        "id": "r1",
        "outputs": [
            {"name": "OUT", "datatype": "FP32", "shape": [1, 3], "data": [2.0, 5.0, -6.0]},
            {"name": "ECHO", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "héllo"]},
        ],
    }


async def test_binary_tensor_data_both_ways(http: aiohttp.ClientSession, served: None) -> None:
    header = {
        "inputs": [
            {"name": "IN", "datatype": "FP32", "shape": [1, 3], "parameters": {"binary_data_size": 12}},
            {"name": "TXT", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]},
        ],
        "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}, {"name": "ECHO"}],
    }
    encoded = json.dumps(header).encode()
    body = encoded + struct.pack("<3f", 1, 2, 3)
    async with http.post(
        "/v2/models/echo/versions/1.0/infer",
        data=body,
        headers={
            "Inference-Header-Content-Length": str(len(encoded)),
            "Content-Type": "application/octet-stream",
        },
    ) as resp:
        assert resp.status == 200, await resp.text()
        raw = await resp.read()
        length = int(resp.headers["Inference-Header-Content-Length"])
    document = json.loads(raw[:length])
    out, echo = document["outputs"]
    assert out["parameters"] == {"binary_data_size": 12}
    assert struct.unpack("<3f", raw[length:]) == (2.0, 4.0, 6.0)
    assert echo["data"] == ["x"]


async def test_health_and_metadata(http: aiohttp.ClientSession, served: None) -> None:
    async with http.get("/v2/health/live") as resp:
        assert (resp.status, await resp.json()) == (200, {"live": True})
    async with http.get("/v2") as resp:
        meta = await resp.json()
        assert meta["name"] == "sluice"
        assert isinstance(meta["extensions"], list)
    async with http.get("/v2/models/echo") as resp:
        assert await resp.json() == {
            "name": "echo",
            "versions": ["1.0"],
            "platform": "torchserve",
            "inputs": [
                {"name": "IN", "datatype": "FP32", "shape": [-1, 3]},
                {"name": "TXT", "datatype": "BYTES", "shape": [-1, -1]},
            ],
            "outputs": [
                {"name": "OUT", "datatype": "FP32", "shape": [-1, 3]},
                {"name": "ECHO", "datatype": "BYTES", "shape": [-1, -1]},
            ],
        }
    async with http.get("/v2/models/echo/versions/1.0/ready") as resp:
        assert resp.status == 200
    async with http.get("/v2/models/echo/config") as resp:
        config = await resp.json()
        assert config["max_batch_size"] == 4
        assert config["input"][0]["data_type"] == "TYPE_FP32"


async def test_errors_are_v2_error_bodies(http: aiohttp.ClientSession, served: None) -> None:
    async with http.post("/v2/models/nope/infer", json=json_request()) as resp:
        assert resp.status == 404
        assert "nope" in (await resp.json())["error"]
    async with http.get("/v2/models/nope/ready") as resp:
        assert resp.status == 404
    bad = json_request()
    bad["inputs"][0]["datatype"] = "INT32"  # type: ignore[index]
    async with http.post("/v2/models/echo/infer", json=bad) as resp:
        assert resp.status == 400
        assert "INT32" in (await resp.json())["error"]
    async with http.post("/v2/models/echo/infer", data=b"{not json") as resp:
        assert resp.status == 400
        assert list(await resp.json()) == ["error"]
    async with http.get("/v2/unknown") as resp:
        assert resp.status == 404
        assert list(await resp.json()) == ["error"]
