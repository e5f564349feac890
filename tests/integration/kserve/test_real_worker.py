"""KServe v2 end to end on the real gateway and real worker processes running real torch handlers
(checklist items 11, 12, 20, 29-32, 35-40): TorchServe OIP JSON rows, tensor rows (numpy and torch),
every datatype, batching, typed and raw outputs, streaming through send_intermediate_predict_response.
"""

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np
import pytest
import redis.asyncio as aioredis
from sluice.kserve.datatypes import DATATYPES
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings
from tests.integration.kserve.conftest import jobs_queued
from tests.support import kserve_models, stack
from tests.support.models import mlp_expected
from tests.support.redis_server import RedisServer

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub

Input = pb.ModelInferRequest.InferInputTensor
Requested = pb.ModelInferRequest.InferRequestedOutputTensor
MODELS = {
    "add_one": kserve_models.add_one_model,
    "echo_tensors": kserve_models.echo_tensors_model,
    "mlp_tensor": kserve_models.mlp_tensor_model,
    "streamer": kserve_models.streamer_model,
}
SAMPLES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], dtype="<u1"),
    "UINT16": np.array([[0, 7, 65535]], dtype="<u2"),
    "UINT32": np.array([[0, 7, 2**32 - 1]], dtype="<u4"),
    "UINT64": np.array([[0, 7, 2**64 - 1]], dtype="<u8"),
    "INT8": np.array([[-128, 7, 127]], dtype="<i1"),
    "INT16": np.array([[-32768, 7, 32767]], dtype="<i2"),
    "INT32": np.array([[-(2**31), 7, 2**31 - 1]], dtype="<i4"),
    "INT64": np.array([[-(2**63), 7, 2**63 - 1]], dtype="<i8"),
    "FP16": np.array([[0.5, -2.0, 65504.0]], dtype="<f2"),
    "FP32": np.array([[0.5, -2.0, 3.25]], dtype="<f4"),
    "FP64": np.array([[0.5, -2.0, 1e300]], dtype="<f8"),
    "BYTES": np.array([[b"", b"abc", b"\x00\xff"]], dtype=object),
}


def raw_of(datatype: str, array: np.ndarray) -> bytes:
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(item)) + item for item in array.reshape(-1))
    return array.tobytes()


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.kill()


@pytest.fixture(scope="module")
def model_dirs(
    module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("models")
    dirs = {
        name: Path(stack.register(module_redis.url, build(name), root)["model_dir"])
        for name, build in MODELS.items()
    }
    workers = {name: stack.start_worker(module_redis.url, name, "1.0", root / "logs") for name in MODELS}
    try:
        stack.wait_workers_ready(module_redis.url, workers)
        yield dirs
    finally:
        for worker in workers.values():
            worker.stop()


@pytest.fixture
async def gateway(module_redis: RedisServer, model_dirs: dict[str, Path]) -> AsyncIterator[Gateway]:
    gw = Gateway(make_settings(module_redis.url))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(grace_s=0)


@pytest.fixture
async def redis_client(module_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client: aioredis.Redis = aioredis.Redis.from_url(module_redis.url)
    try:
        yield client
    finally:
        await client.aclose()


def add_one_request(rows: list[list[float]], **fields: Any) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name="add_one",
        id="req-7",
        inputs=[Input(name="INPUT0", datatype="FP32", shape=[len(rows), 4])],
        raw_input_contents=[np.array(rows, dtype="<f4").tobytes()],
        **fields,
    )


def output(response: pb.ModelInferResponse, name: str) -> np.ndarray:
    index = [o.name for o in response.outputs].index(name)
    meta = response.outputs[index]
    if meta.datatype == "BYTES":
        raw, items = response.raw_output_contents[index], []
        while raw:
            (length,) = struct.unpack_from("<I", raw)
            items.append(raw[4 : 4 + length])
            raw = raw[4 + length :]
        return np.array(items, dtype=object).reshape(meta.shape)
    dtype = SAMPLES[meta.datatype].dtype
    return np.frombuffer(response.raw_output_contents[index], dtype=dtype).reshape(meta.shape)


async def test_oip_json_handler_sees_v2_json_and_answers_raw(stub: "GRPCInferenceServiceAsyncStub") -> None:
    rows = [[0.0, 1.0, 2.0, 3.0], [-1.0, -2.0, 0.5, 10.0]]
    parameters = {
        "temperature": pb.InferParameter(double_param=0.25),
        "name": pb.InferParameter(string_param="x"),
        "flag": pb.InferParameter(bool_param=True),
        "count": pb.InferParameter(int64_param=-3),
        "big": pb.InferParameter(uint64_param=2**63),
    }
    response = await stub.ModelInfer(add_one_request(rows, parameters=parameters), timeout=30)
    assert (response.id, response.model_name, response.model_version) == ("req-7", "add_one", "1.0")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", "FP32", [2, 4]),
        ("PARAMS", "BYTES", [1]),
    ]
    assert not any(o.HasField("contents") for o in response.outputs)
    np.testing.assert_array_equal(output(response, "OUTPUT0"), np.array(rows, dtype=np.float32) + 1)
    seen = json.loads(output(response, "PARAMS")[0])
    assert seen == {"big": 2**63, "count": -3, "flag": True, "name": "x", "temperature": 0.25}


async def test_typed_inputs_requested_outputs_and_typed_outputs(
    stub: "GRPCInferenceServiceAsyncStub",
) -> None:
    request = pb.ModelInferRequest(
        model_name="add_one",
        inputs=[
            Input(
                name="INPUT0",
                datatype="FP32",
                shape=[1, 4],
                contents=pb.InferTensorContents(fp32_contents=[1, 2, 3, 4]),
            )
        ],
        outputs=[Requested(name="OUTPUT0")],
        parameters={"binary_data_output": pb.InferParameter(bool_param=False)},
    )
    response = await stub.ModelInfer(request, timeout=30)
    assert [o.name for o in response.outputs] == ["OUTPUT0"]
    assert not response.raw_output_contents
    assert list(response.outputs[0].contents.fp32_contents) == [2, 3, 4, 5]


async def test_concurrent_requests_are_batched_one_row_per_job(
    stub: "GRPCInferenceServiceAsyncStub", model_dirs: dict[str, Path]
) -> None:
    async def one(value: int) -> None:
        request = pb.ModelInferRequest(
            model_name="echo_tensors",
            inputs=[Input(name="x", datatype="INT32", shape=[2])],
            raw_input_contents=[np.array([value, -value], dtype="<i4").tobytes()],
        )
        response = await stub.ModelInfer(request, timeout=30)
        assert output(response, "OUT_x").tolist() == [value, -value]

    await asyncio.gather(*(one(v) for v in range(16)))
    sizes = [int(line) for line in (model_dirs["echo_tensors"] / "batches.txt").read_text().split()]
    assert max(sizes) > 1


async def test_every_datatype_round_trips_raw(stub: "GRPCInferenceServiceAsyncStub") -> None:
    bf16 = np.array([[0x3F00, 0xC000, 0x4040]], dtype="<u2")
    inputs = [Input(name=name, datatype=name, shape=[1, 3]) for name in [*SAMPLES, "BF16"]]
    raws = [raw_of(name, array) for name, array in SAMPLES.items()] + [bf16.tobytes()]
    response = await stub.ModelInfer(
        pb.ModelInferRequest(model_name="echo_tensors", inputs=inputs, raw_input_contents=raws), timeout=30
    )
    got = {
        o.name: (o.datatype, list(o.shape), raw)
        for o, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }
    for name, raw in zip([*SAMPLES, "BF16"], raws, strict=True):
        # BF16 reaches a numpy handler as float32 and comes back as FP32 (the model declares no type).
        expected_type = "FP32" if name == "BF16" else name
        datatype, shape, data = got[f"OUT_{name}"]
        assert (datatype, shape) == (expected_type, [1, 3])
        if name == "BF16":
            assert np.frombuffer(data, "<f4").tolist() == [0.5, -2.0, 3.0]
        else:
            assert data == raw, name


async def test_every_typed_datatype_gives_the_raw_result(stub: "GRPCInferenceServiceAsyncStub") -> None:
    inputs = []
    for name, array in SAMPLES.items():
        field = DATATYPES[name].contents_field
        if field is None:  # FP16: raw only
            continue
        inputs.append(
            Input(
                name=name,
                datatype=name,
                shape=[1, 3],
                contents=pb.InferTensorContents(**{field: array.reshape(-1).tolist()}),
            )
        )
    response = await stub.ModelInfer(
        pb.ModelInferRequest(model_name="echo_tensors", inputs=inputs), timeout=30
    )
    for out, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        name = out.name.removeprefix("OUT_")
        assert raw == raw_of(name, SAMPLES[name]), name


async def test_torch_tensor_handler_runs_the_model(stub: "GRPCInferenceServiceAsyncStub") -> None:
    rows = [[0.1, -0.2, 0.3, 0.4], [1.0, 2.0, -3.0, 0.5], [0.0, 0.0, 0.0, 0.0]]
    request = pb.ModelInferRequest(
        model_name="mlp_tensor",
        inputs=[Input(name="INPUT0", datatype="FP32", shape=[3, 4])],
        raw_input_contents=[np.array(rows, dtype="<f4").tobytes()],
    )
    response = await stub.ModelInfer(request, timeout=30)
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [("OUTPUT0", "FP32", [3, 3])]
    np.testing.assert_allclose(output(response, "OUTPUT0"), mlp_expected(rows), atol=1e-5)


async def test_metadata_and_config_come_from_the_declaration(stub: "GRPCInferenceServiceAsyncStub") -> None:
    meta = await stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp_tensor"))
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [("OUTPUT0", "FP32", [-1, 3])]
    config = (await stub.ModelConfig(pb.ModelConfigRequest(name="add_one"))).config
    assert (config.max_batch_size, list(config.dynamic_batching.preferred_batch_size)) == (8, [4])
    assert (
        await stub.ModelConfig(pb.ModelConfigRequest(name="streamer"))
    ).config.model_transaction_policy.decoupled
    assert (await stub.ModelReady(pb.ModelReadyRequest(name="add_one"))).ready


async def test_a_bad_request_never_reaches_the_worker(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis
) -> None:
    request = add_one_request([[1.0, 2.0, 3.0, 4.0]])
    request.raw_input_contents[0] = b"\0" * 12
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        caught.value.details()
        == "input byte size mismatch for input 'INPUT0' for model 'add_one'. Expected 16, got 12"
    )
    assert await jobs_queued(redis_client, "add_one") == 0


def stream_request(
    request_id: str, chunks: int, *, empty_final: bool = False, enable_empty: bool = False
) -> pb.ModelInferRequest:
    parameters = {"chunks": pb.InferParameter(int64_param=chunks)}
    if empty_final:
        parameters["empty_final"] = pb.InferParameter(bool_param=True)
    if enable_empty:
        parameters["triton_enable_empty_final_response"] = pb.InferParameter(bool_param=True)
    return pb.ModelInferRequest(model_name="streamer", id=request_id, parameters=parameters)


def chunk_of(response: pb.ModelInferResponse) -> int | None:
    if not response.outputs:
        return None
    return int(np.frombuffer(response.raw_output_contents[0], "<i4")[0])


async def test_model_stream_infer_streams_intermediate_results(stub: "GRPCInferenceServiceAsyncStub") -> None:
    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield stream_request("a", 3)
        yield stream_request("b", 1, empty_final=True)
        yield stream_request("c", 1, empty_final=True, enable_empty=True)

    call = stub.ModelStreamInfer(requests(), timeout=60)
    seen: dict[str, list[tuple[int | None, bool]]] = {}
    async for message in call:
        assert message.error_message == ""
        response = message.infer_response
        seen.setdefault(response.id, []).append(
            (chunk_of(response), response.parameters["triton_final_response"].bool_param)
        )
    assert await call.code() == grpc.StatusCode.OK
    assert seen == {
        "a": [(0, False), (1, False), (2, False), (-1, True)],
        "b": [(0, False)],
        "c": [(0, False), (None, True)],
    }


async def test_model_infer_stream_and_unary_on_a_decoupled_model(
    stub: "GRPCInferenceServiceAsyncStub",
) -> None:
    call = stub.ModelInferStream(stream_request("m", 2), timeout=60)
    assert [chunk_of(r) async for r in call] == [0, 1, -1]
    assert await call.code() == grpc.StatusCode.OK
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(stream_request("u", 1), timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.fixture
async def stub(gateway: Gateway) -> AsyncIterator[GRPCInferenceServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        yield GRPCInferenceServiceStub(channel)
