"""What the gateway refuses before anything is enqueued (checklist items 10, 13-27, 30, 33, 40, 4):
the status code AND an empty job stream. Workers are stood in for by the scripted responder."""

import asyncio
import dataclasses
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.kserve.declaration import ModelTensors
from sluice.redis import keys
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub

from tests.integration.kserve.conftest import ADD_ONE, jobs_queued, kserve_ok, register
from tests.support.eventually import eventually
from tests.support.responder import Responder

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
Input = pb.ModelInferRequest.InferInputTensor


def add_one(
    *, shape: tuple[int, ...] = (1, 4), datatype: str = "FP32", raw: bytes | None = None, **fields: Any
) -> Any:
    """An FP32 request for the declared model "m"; ``fields`` override any message field."""
    count = 1
    for dim in shape:
        count *= dim
    message: dict[str, Any] = {
        "model_name": "m",
        "id": "req-1",
        "inputs": [Input(name="INPUT0", datatype=datatype, shape=shape)],
        "raw_input_contents": [raw if raw is not None else b"\0" * 4 * count],
    }
    return pb.ModelInferRequest(**{**message, **fields})


BAD_REQUESTS = {
    "byte size": add_one(raw=b"\0" * 15),
    "datatype": add_one(datatype="INT32"),
    "unknown datatype": add_one(datatype="fp32"),
    "shape": add_one(shape=(1, 5), raw=b"\0" * 20),
    "rank": add_one(shape=(4,), raw=b"\0" * 16),
    "batch too large": add_one(shape=(9, 4)),
    "raw and typed": pb.ModelInferRequest(
        model_name="m",
        inputs=[
            Input(
                name="INPUT0",
                datatype="FP32",
                shape=[1, 4],
                contents=pb.InferTensorContents(fp32_contents=[1] * 4),
            )
        ],
        raw_input_contents=[b"\0" * 16],
    ),
    "raw count": add_one(raw_input_contents=[b"\0" * 16, b"\0"]),
    "typed count": pb.ModelInferRequest(
        model_name="m",
        inputs=[
            Input(
                name="INPUT0",
                datatype="FP32",
                shape=[1, 4],
                contents=pb.InferTensorContents(fp32_contents=[1] * 3),
            )
        ],
    ),
    "wrong contents field": pb.ModelInferRequest(
        model_name="m",
        inputs=[
            Input(
                name="INPUT0",
                datatype="FP32",
                shape=[1, 4],
                contents=pb.InferTensorContents(int_contents=[1] * 4),
            )
        ],
    ),
    "missing input": pb.ModelInferRequest(model_name="m"),
    "extra input": add_one(
        inputs=[
            Input(name="INPUT0", datatype="FP32", shape=[1, 4]),
            Input(name="X", datatype="INT8", shape=[1]),
        ],
        raw_input_contents=[b"\0" * 16, b"\0"],
    ),
    "duplicate input": add_one(
        inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 4])] * 2, raw_input_contents=[b"\0" * 16] * 2
    ),
    "unknown output": add_one(outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="NOPE")]),
    "priority type": add_one(parameters={"priority": pb.InferParameter(string_param="high")}),
    "negative priority": add_one(parameters={"priority": pb.InferParameter(int64_param=-1)}),
    "timeout type": add_one(parameters={"timeout": pb.InferParameter(double_param=1.0)}),
    "triton key": add_one(parameters={"triton_foo": pb.InferParameter(bool_param=True)}),
    "malformed version": add_one(model_version="a b"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
async def test_bad_requests_are_refused_before_enqueue(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start, case: str
) -> None:
    await register(redis_client, "m", tensors=ADD_ONE)
    await responder(answer, model="m")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(BAD_REQUESTS[case], timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert "\n" not in (caught.value.details() or "")  # KServe details are the bare message
    assert await jobs_queued(redis_client, "m") == 0


async def answer(job: Job) -> AsyncIterator[Reply]:
    yield kserve_ok(job)


async def test_byte_size_message_is_tritons(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis
) -> None:
    await register(redis_client, "m", tensors=ADD_ONE)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(add_one(raw=b"\0" * 15))
    assert (
        caught.value.details()
        == "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 16, got 15"
    )


@pytest.mark.parametrize(
    ("request_message", "code", "details"),
    [
        (add_one(model_name="nope"), grpc.StatusCode.NOT_FOUND, "Model not found: nope"),
        (pb.ModelInferRequest(), grpc.StatusCode.NOT_FOUND, "Model not found: "),
        (
            add_one(model_version="9"),
            grpc.StatusCode.NOT_FOUND,
            "Model version: 9 does not exist for model: m",
        ),
    ],
)
async def test_unknown_models_and_versions_are_not_found(
    stub: "GRPCInferenceServiceAsyncStub",
    redis_client: aioredis.Redis,
    request_message: Any,
    code: grpc.StatusCode,
    details: str,
) -> None:
    await register(redis_client, "m", tensors=ADD_ONE)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(request_message)
    assert (caught.value.code(), caught.value.details()) == (code, details)


async def test_a_model_without_workers_is_unavailable(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis
) -> None:
    await register(redis_client, "m", tensors=ADD_ONE)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(add_one())
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_unary_infer_on_a_decoupled_model_is_unimplemented(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=dataclasses.replace(ADD_ONE, decoupled=True))
    await responder(answer, model="m")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(add_one())
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert caught.value.details() == "ModelInfer RPC doesn't support models with decoupled transaction policy"
    assert await jobs_queued(redis_client, "m") == 0


async def test_good_requests_reach_the_worker_undecoded(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=ADD_ONE)
    peer = await responder(answer, model="m")
    request = add_one(
        shape=(2, 4),
        raw=struct.pack("<8f", *range(8)),
        parameters={
            "priority": pb.InferParameter(uint64_param=2),
            "temperature": pb.InferParameter(double_param=0.5),
            "timeout": pb.InferParameter(int64_param=3_000_000),
        },
    )
    response = await stub.ModelInfer(request)
    assert (response.id, response.model_name, response.model_version) == ("req-1", "m", "1.0")
    (job,) = peer.jobs
    assert pb.ModelInferRequest.FromString(job.request) == request
    assert job.protocol == 3  # KSERVE
    # The timeout parameter (3 s) becomes the job's deadline.
    assert 2_500 < job.deadline_unix_ms - job.enqueued_unix_ms <= 3_000


async def test_an_undeclared_model_takes_any_well_formed_tensors(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=ModelTensors())
    await responder(answer, model="m")
    await stub.ModelInfer(add_one(datatype="BF16", shape=(3,), raw=b"\0" * 6))


@pytest.mark.parametrize(
    "settings_overrides", [{"kserve_max_request_size": 1 << 20, "max_request_size": 1 << 16}], indirect=True
)
async def test_message_limits_per_path(
    stub: "GRPCInferenceServiceAsyncStub",
    channel: grpc.aio.Channel,
    redis_client: aioredis.Redis,
    responder: Start,
) -> None:
    await register(redis_client, "m")
    await responder(answer, model="m")
    # Under the KServe limit (1 MiB) but over TorchServe's max_request_size (64 KiB).
    await stub.ModelInfer(add_one(shape=(100_000,)), timeout=10)
    torchserve = InferenceAPIsServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await torchserve.Predictions(PredictionsRequest(model_name="m", input={"data": b"\0" * 100_000}))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Over the KServe limit: refused by gRPC itself.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(add_one(shape=(300_000,)), timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await jobs_queued(redis_client, "m") == 0


async def test_a_full_queue_is_refused_at_once(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    release = asyncio.Event()

    async def hold(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield kserve_ok(job)

    await register(redis_client, "m", tensors=ADD_ONE, job_queue_size=1)
    peer = await responder(hold, model="m")
    first = asyncio.ensure_future(stub.ModelInfer(add_one(), timeout=10))
    await peer.wait_for_jobs(1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(add_one(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    release.set()
    assert (await first).id == "req-1"


async def test_a_client_deadline_cancels_the_job(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    async def never(job: Job) -> AsyncIterator[Reply]:
        await asyncio.sleep(60)
        yield kserve_ok(job)

    await register(redis_client, "m", tensors=ADD_ONE)
    peer = await responder(never, model="m")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(add_one(), timeout=1.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    (job,) = await peer.wait_for_jobs(1, timeout_s=10)
    await eventually(lambda: redis_client.exists(keys.cancel("m", "1.0", job.job_id)), timeout_s=10)
