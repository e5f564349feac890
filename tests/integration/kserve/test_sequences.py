"""A stateful model over KServe v2 (gRPC ModelInfer, ModelStreamInfer, ModelInferStream and REST),
against the real gateway and Redis; the holder of the sequences is a stand-in
(tests/support/sequence_holder.py). Triton's sequence parameters route the request to its sequence,
the handler sees TorchServe's sequence headers instead of them, and a request that names no sequence,
or joins one that is not live, gets Triton's errors."""

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job
from sluice.redis import keys
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.app import Gateway

from tests.integration.kserve.conftest import jobs_queued, kserve_ok, register
from tests.support.eventually import eventually
from tests.support.responder import Responder, fixed
from tests.support.sequence_holder import SequenceHolder

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub

STATEFUL: dict[str, Any] = {
    "sequence_batching": True,
    "sequence_max_idle_ms": 60_000,
    "max_sequence_job_queue_size": 8,
    "batch_size": 2,
    "max_batch_delay_ms": 5,
}
ID, START, END = "ts_request_sequence_id", "ts_request_sequence_start", "ts_request_sequence_end"
NO_CORRELATION_ID = "inference request to model 'm' must specify a non-zero or non-empty correlation ID"


def start_flag_required(sequence_id: str) -> str:
    return (
        f"inference request for sequence {sequence_id} to model 'm' must specify the START flag on the "
        "first request of the sequence"
    )


def request(request_id: str = "r", **parameters: pb.InferParameter) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name="m",
        id=request_id,
        inputs=[pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])],
        raw_input_contents=[b"\0\0\x80?"],
        parameters=parameters,
    )


def json_request(**parameters: object) -> dict[str, object]:
    return {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}],
        "parameters": parameters,
    }


def int64(value: int) -> pb.InferParameter:
    return pb.InferParameter(int64_param=value)


def flag(value: bool) -> pb.InferParameter:
    return pb.InferParameter(bool_param=value)


def parameters_of(job: Job) -> set[str]:
    return set(pb.ModelInferRequest.FromString(job.request).parameters)


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{gateway.rest_port}") as session:
        yield session


@pytest.fixture
async def holder(redis_client: aioredis.Redis) -> SequenceHolder:
    await register(redis_client, "m", **STATEFUL)
    return await SequenceHolder(redis_client, "m").announce()


async def test_model_infer_routes_to_the_sequence_and_the_handler_sees_torchserves_headers(
    stub: "GRPCInferenceServiceAsyncStub", holder: SequenceHolder, redis_client: aioredis.Redis
) -> None:
    first = request(
        "a", sequence_id=int64(42), sequence_start=flag(True), temperature=pb.InferParameter(double_param=0.5)
    )
    call = asyncio.ensure_future(stub.ModelInfer(first, timeout=10))
    job = await holder.answer("42", kserve_ok)
    response = await call
    assert response.id == "a"
    assert "sequence_id" not in response.parameters, "Triton does not echo the correlation id"
    assert (job.sequence_id, job.sequence_start, job.sequence_end) == ("42", True, False)
    assert (job.headers[ID], job.headers[START]) == ("42", "true")
    assert parameters_of(job) == {"temperature"}, "the sequence parameters are not the handler's"
    assert await holder.held() == {"42"}

    last = request("b", sequence_id=int64(42), sequence_end=flag(True))
    call = asyncio.ensure_future(stub.ModelInfer(last, timeout=10))
    job = await holder.answer("42", kserve_ok)
    assert (await call).id == "b"
    assert (job.sequence_start, job.sequence_end, job.headers[END]) == (False, True, "true")
    assert START not in job.headers
    assert parameters_of(job) == set()
    assert await jobs_queued(redis_client, "m") == 0, "nothing in the version's shared stream"


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        {"sequence_start": flag(True)},
        {"sequence_id": int64(0)},
        {"sequence_id": pb.InferParameter(string_param="")},
    ],
    ids=["none", "flags only", "zero", "empty"],
)
async def test_a_request_that_names_no_sequence_gets_tritons_error(
    stub: "GRPCInferenceServiceAsyncStub",
    holder: SequenceHolder,
    redis_client: aioredis.Redis,
    parameters: dict[str, pb.InferParameter],
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(request("r", **parameters), timeout=10)
    assert (caught.value.code(), caught.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        NO_CORRELATION_ID,
    )
    assert not await redis_client.exists(keys.live_sequences("m", "1.0"))


async def test_joining_a_sequence_that_is_not_live_needs_the_start_flag(
    stub: "GRPCInferenceServiceAsyncStub", holder: SequenceHolder
) -> None:
    unknown = request(sequence_id=pb.InferParameter(string_param="s-1"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(unknown, timeout=10)
    assert (caught.value.code(), caught.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        start_flag_required("s-1"),
    )
    # Ended: the next request must start it again.
    ending = request(sequence_id=int64(7), sequence_start=flag(True), sequence_end=flag(True))
    call = asyncio.ensure_future(stub.ModelInfer(ending, timeout=10))
    await holder.answer("7", kserve_ok)
    await call
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(request(sequence_id=int64(7)), timeout=10)
    assert caught.value.details() == start_flag_required("7")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"sequence_id": pb.InferParameter(double_param=1.0)},
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
        ),
        (
            {"sequence_id": int64(1), "sequence_start": int64(1)},
            "invalid value type for 'sequence_start' parameter, expected bool_param.",
        ),
        (
            {"sequence_id": int64(1), "sequence_end": pb.InferParameter(string_param="true")},
            "invalid value type for 'sequence_end' parameter, expected bool_param.",
        ),
    ],
)
async def test_sequence_parameters_of_the_wrong_type_are_refused(
    stub: "GRPCInferenceServiceAsyncStub",
    holder: SequenceHolder,
    parameters: dict[str, pb.InferParameter],
    message: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(request("r", **parameters), timeout=10)
    assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


async def test_model_stream_infer_pipelines_a_sequence_in_order_with_in_stream_errors(
    stub: "GRPCInferenceServiceAsyncStub", holder: SequenceHolder
) -> None:
    requests = [
        request("1", sequence_id=int64(5), sequence_start=flag(True)),
        request("2", sequence_id=int64(5)),
        request("3", sequence_id=int64(5), sequence_end=flag(True)),
        request("4", sequence_id=int64(6)),  # never started
        request("5"),  # names no sequence
    ]
    call = stub.ModelStreamInfer(iter(requests), timeout=10)
    jobs = [await holder.answer("5", kserve_ok) for _ in range(3)]
    assert [pb.ModelInferRequest.FromString(job.request).id for job in jobs] == ["1", "2", "3"]
    answered: list[pb.ModelStreamInferResponse] = []
    errors: list[pb.ModelStreamInferResponse] = []
    async for message in call:
        (errors if message.error_message else answered).append(message)
    assert [m.infer_response.id for m in answered] == ["1", "2", "3"]
    assert {(m.infer_response.id, m.error_message) for m in errors} == {
        ("4", start_flag_required("6")),
        ("5", NO_CORRELATION_ID),
    }


async def test_model_infer_stream_carries_the_sequence(
    stub: "GRPCInferenceServiceAsyncStub", holder: SequenceHolder
) -> None:
    call = stub.ModelInferStream(request(sequence_id=int64(9), sequence_start=flag(True)), timeout=10)
    job = await holder.answer("9", kserve_ok)
    assert [response.id async for response in call] == ["r"]
    assert (job.sequence_id, job.headers[START]) == ("9", "true")


async def test_rest_infer_takes_the_sequence_parameters_as_json(
    http: aiohttp.ClientSession, holder: SequenceHolder
) -> None:
    post = asyncio.ensure_future(
        http.post("/v2/models/m/infer", json=json_request(sequence_id="abc", sequence_start=True, top_k=3))
    )
    job = await holder.answer("abc", kserve_ok)
    async with await post as resp:
        assert resp.status == 200
        assert "parameters" not in await resp.json()
    assert (job.sequence_id, job.sequence_start, job.headers[ID]) == ("abc", True, "abc")
    assert parameters_of(job) == {"top_k"}

    post = asyncio.ensure_future(
        http.post("/v2/models/m/versions/1.0/infer", json=json_request(sequence_id=12, sequence_start=True))
    )
    job = await holder.answer("12", kserve_ok)
    async with await post as resp:
        assert resp.status == 200
    assert job.sequence_id == "12"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({}, NO_CORRELATION_ID),
        ({"sequence_id": 0}, NO_CORRELATION_ID),
        ({"sequence_id": "late"}, start_flag_required("late")),
        ({"sequence_id": 1.5}, "invalid value type for 'sequence_id' parameter"),
        ({"sequence_id": 1, "sequence_start": "yes"}, "invalid value type for 'sequence_start' parameter"),
    ],
)
async def test_rest_refusals_are_400_with_the_text(
    http: aiohttp.ClientSession, holder: SequenceHolder, parameters: dict[str, object], message: str
) -> None:
    async with http.post("/v2/models/m/infer", json=json_request(**parameters)) as resp:
        assert resp.status == 400
        assert (await resp.json())["error"].startswith(message)


async def test_model_config_reports_the_sequence_batcher(
    stub: "GRPCInferenceServiceAsyncStub", http: aiohttp.ClientSession, holder: SequenceHolder
) -> None:
    config = (await stub.ModelConfig(pb.ModelConfigRequest(name="m"), timeout=10)).config
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"
    assert config.sequence_batching.max_sequence_idle_microseconds == 60_000_000
    assert config.sequence_batching.direct.max_queue_delay_microseconds == 5000
    async with http.get("/v2/models/m/config") as resp:
        sequence_batching = (await resp.json())["sequence_batching"]
    assert sequence_batching == {
        "max_sequence_idle_microseconds": "60000000",
        "direct": {"max_queue_delay_microseconds": "5000"},
    }


async def test_a_model_that_is_not_stateful_routes_as_before(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Any
) -> None:
    await register(redis_client, "m")
    peer: Responder = await responder(fixed(kserve_ok), model="m")
    await stub.ModelInfer(request(sequence_id=int64(3), sequence_start=flag(True)), timeout=10)
    await stub.ModelInfer(request(), timeout=10)  # no sequence needed
    await eventually(lambda: len(peer.jobs) == 2)
    sequenced, plain = peer.jobs
    assert (sequenced.headers[ID], sequenced.headers[START]) == ("3", "true")
    assert parameters_of(sequenced) == set()
    assert ID not in plain.headers
