"""ModelStreamInfer (Triton's bidirectional stream) and ModelInferStream (MAX's server stream) on the real
gateway, with the scripted responder producing the worker's replies (checklist items 35-39, 41)."""

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.errors import ErrorCode
from sluice.v1 import kserve_pb2 as pb

from tests.integration.kserve.conftest import ADD_ONE, jobs_queued, kserve_ok, register
from tests.support.responder import Responder, failure

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
DECOUPLED = dataclasses.replace(ADD_ONE, decoupled=True)


def request(
    request_id: str, *, model: str = "m", chunks: int = 2, empty_final: bool = False
) -> pb.ModelInferRequest:
    parameters = {"chunks": pb.InferParameter(int64_param=chunks)}
    if empty_final:
        parameters["triton_enable_empty_final_response"] = pb.InferParameter(bool_param=True)
    return pb.ModelInferRequest(
        model_name=model,
        id=request_id,
        inputs=[pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 4])],
        raw_input_contents=[b"\0" * 16],
        parameters=parameters,
    )


async def chunked(job: Job) -> AsyncIterator[Reply]:
    """``chunks`` intermediate replies with data, then a final one: with data unless the request id
    starts with "empty", a failure if it starts with "fail"."""
    message = pb.ModelInferRequest.FromString(job.request)
    for seq in range(message.parameters["chunks"].int64_param):
        await asyncio.sleep(0.01)
        yield kserve_ok(job, seq=seq, final=False)
    seq = message.parameters["chunks"].int64_param
    if message.id.startswith("fail"):
        yield failure(job, ErrorCode.HANDLER_FAILED, 503, "Prediction failed", seq=seq)
    else:
        yield kserve_ok(job, seq=seq, outputs=0 if message.id.startswith("empty") else 1)


async def _stream(
    stub: "GRPCInferenceServiceAsyncStub", *requests: pb.ModelInferRequest
) -> list[pb.ModelStreamInferResponse]:
    async def send() -> AsyncIterator[pb.ModelInferRequest]:
        for item in requests:
            yield item

    call = stub.ModelStreamInfer(send(), timeout=10)
    responses = [response async for response in call]
    assert await call.code() == grpc.StatusCode.OK
    return responses


def _summary(responses: list[pb.ModelStreamInferResponse]) -> list[tuple[str, str, bool, int]]:
    return [
        (
            r.infer_response.id,
            r.error_message,
            r.infer_response.parameters["triton_final_response"].bool_param,
            len(r.infer_response.outputs),
        )
        for r in responses
    ]


async def test_a_decoupled_request_streams_every_reply_and_marks_the_last(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=DECOUPLED)
    peer = await responder(chunked, model="m")
    responses = await _stream(stub, request("a", chunks=2))
    assert _summary(responses) == [("a", "", False, 1), ("a", "", False, 1), ("a", "", True, 1)]
    final = responses[-1].infer_response
    assert (final.model_name, final.model_version) == ("m", "1.0")
    assert peer.jobs[0].streaming


async def test_a_non_decoupled_request_answers_once_and_may_share_a_batch(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=ADD_ONE)
    peer = await responder(chunked, model="m")
    responses = await _stream(stub, request("a", chunks=0))
    assert _summary(responses) == [("a", "", True, 1)]
    assert not peer.jobs[0].streaming


async def test_several_requests_interleave_and_errors_stay_in_the_stream(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=DECOUPLED)
    await responder(chunked, model="m")
    bad_shape = request("bad")
    bad_shape.inputs[0].shape[:] = [1, 5]
    bad_shape.raw_input_contents[:] = [b"\0" * 20]
    responses = await _stream(
        stub,
        request("a", chunks=3),
        request("lost", model="nope"),
        bad_shape,
        request("fail-1", chunks=1),
        request("b", chunks=1),
    )
    by_id: dict[str, list[tuple[str, str, bool, int]]] = {}
    for item in _summary(responses):
        by_id.setdefault(item[0], []).append(item)
    assert by_id["a"] == [("a", "", False, 1)] * 3 + [("a", "", True, 1)]
    assert by_id["b"] == [("b", "", False, 1), ("b", "", True, 1)]
    assert by_id["lost"] == [("lost", "Model not found: nope", False, 0)]
    assert by_id["bad"][0][1].startswith("unexpected shape for input 'INPUT0' for model 'm'")
    assert by_id["fail-1"] == [("fail-1", "", False, 1), ("fail-1", "Prediction failed", False, 0)]
    assert await jobs_queued(redis_client, "m") == 0


@pytest.mark.parametrize("enabled", [False, True])
async def test_empty_final_response_only_when_asked(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start, enabled: bool
) -> None:
    await register(redis_client, "m", tensors=DECOUPLED)
    await responder(chunked, model="m")
    responses = await _stream(stub, request("empty", chunks=2, empty_final=enabled))
    expected = [("empty", "", False, 1)] * 2 + ([("empty", "", True, 0)] if enabled else [])
    assert _summary(responses) == expected
    if enabled:
        final = responses[-1].infer_response
        assert (final.model_name, final.model_version) == ("m", "1.0")


async def test_half_close_waits_for_outstanding_requests(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=DECOUPLED)
    await responder(chunked, model="m")
    call = stub.ModelStreamInfer(timeout=10)
    for name in ("x", "y"):
        await call.write(request(name, chunks=5))
    await call.done_writing()
    responses = [response async for response in call]
    assert sum(r.infer_response.parameters["triton_final_response"].bool_param for r in responses) == 2
    assert len(responses) == 12
    assert await call.code() == grpc.StatusCode.OK


async def test_model_infer_stream_yields_each_response_then_ends(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=DECOUPLED)
    await responder(chunked, model="m")
    call = stub.ModelInferStream(request("a", chunks=2), timeout=10)
    responses = [response async for response in call]
    assert [(r.id, len(r.outputs)) for r in responses] == [("a", 1)] * 3
    assert await call.code() == grpc.StatusCode.OK
    # A closing reply without outputs only marks the end: not sent.
    call = stub.ModelInferStream(request("empty", chunks=1), timeout=10)
    assert [len(r.outputs) async for r in call] == [1]


async def test_model_infer_stream_failures_end_the_call_with_a_status(
    stub: "GRPCInferenceServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "m", tensors=DECOUPLED)
    await responder(chunked, model="m")
    call = stub.ModelInferStream(request("fail", chunks=1), timeout=10)
    received = []

    async def read() -> None:
        async for response in call:
            received.append(response)

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read()
    assert len(received) == 1
    assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.UNAVAILABLE, "Prediction failed")
    call = stub.ModelInferStream(request("x", model="nope"), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
