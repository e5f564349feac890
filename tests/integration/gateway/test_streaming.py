"""StreamPredictions (server streaming) and StreamPredictions2 (bidirectional)."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import pytest
import redis.asyncio as aioredis
from google.rpc import error_details_pb2
from sluice.envelope import Job, Reply
from sluice.errors import ErrorCode
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import register
from tests.support.grpc_calls import read_message
from tests.support.responder import Responder, failure, fixed, ok, request_of

if TYPE_CHECKING:
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]


def data(
    value: bytes, model: str = "echo", sequence_id: str | None = None, **extra: bytes
) -> PredictionsRequest:
    request = PredictionsRequest(model_name=model, input={"data": value, **extra})
    if sequence_id is not None:
        request.sequence_id = sequence_id
    return request


def chunks(count: int, *, final: bytes = b"final", attempt: int = 1) -> Callable[[Job], AsyncIterator[Reply]]:
    async def script(job: Job) -> AsyncIterator[Reply]:
        for seq in range(count):
            yield ok(job, f"chunk-{seq}".encode(), seq=seq, final=False, attempt=attempt)
        yield ok(job, final, seq=count, attempt=attempt)

    return script


async def test_stream_predictions_yields_every_reply_in_order(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    peer = await responder(chunks(3))
    call = stub.StreamPredictions(data(b"x"), timeout=10)
    messages = [response.prediction async for response in call]
    assert messages == [b"chunk-0", b"chunk-1", b"chunk-2", b"final"]
    assert await call.code() == grpc.StatusCode.OK
    assert peer.jobs[0].streaming


async def test_stream_predictions_without_intermediate_replies_yields_one_message(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    await responder()
    call = stub.StreamPredictions(data(b"only"), timeout=10)
    assert [response.prediction async for response in call] == [b"only"]
    assert await call.code() == grpc.StatusCode.OK


async def test_stream_predictions_failure_after_chunks(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    await responder(
        fixed(
            lambda job: ok(job, b"chunk-0", final=False),
            lambda job: failure(job, ErrorCode.HANDLER_FAILED, 503, "Prediction failed", seq=1),
        )
    )
    call = stub.StreamPredictions(data(b"x"), timeout=10)
    received = [(await read_message(call)).prediction]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert received == [b"chunk-0"]
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "Prediction failed\norg.pytorch.serve.http.InternalServerException"


async def test_redelivery_after_forwarded_chunks_fails_the_stream(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    await responder(
        fixed(
            lambda job: ok(job, b"a1-chunk-0", final=False),
            lambda job: ok(job, b"a2-chunk-0", final=False, attempt=2),
            lambda job: ok(job, b"a2-final", seq=1, attempt=2),
        )
    )
    call = stub.StreamPredictions(data(b"x"), timeout=10)
    received = [(await read_message(call)).prediction]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert received == [b"a1-chunk-0"]
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert (caught.value.details() or "").startswith("worker lost mid-stream\n")


async def test_redelivery_before_anything_was_forwarded_is_accepted(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    # The first attempt died silently; a zombie of it answers late and is ignored; seq repeats dropped.
    await responder(
        fixed(
            lambda job: ok(job, b"a2-chunk-0", final=False, attempt=2),
            lambda job: ok(job, b"a2-chunk-0", final=False, attempt=2),
            lambda job: ok(job, b"a1-late", final=False, seq=1, attempt=1),
            lambda job: ok(job, b"a2-final", seq=1, attempt=2),
        )
    )
    call = stub.StreamPredictions(data(b"x"), timeout=10)
    assert [response.prediction async for response in call] == [b"a2-chunk-0", b"a2-final"]


async def test_stream2_answers_each_request_and_echoes_the_sequence_id(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    peer = await responder()
    requests = [
        data(b"first", sequence_id="s1", ts_request_sequence_start=b"true"),
        data(b"second", sequence_id="s1"),
        data(b"last", sequence_id="s1", ts_request_sequence_end=b"TRUE"),
    ]
    call = stub.StreamPredictions2(iter(requests), timeout=10)
    responses = [response async for response in call]
    assert await call.code() == grpc.StatusCode.OK
    assert sorted(r.prediction for r in responses) == [b"first", b"last", b"second"]
    assert {r.sequence_id for r in responses} == {"s1"}
    assert not any(r.HasField("status") for r in responses)
    headers = {request_of(job).input["data"]: dict(job.headers) for job in peer.jobs}
    assert headers[b"first"] == {"ts_request_sequence_id": "s1", "ts_request_sequence_start": "true"}
    assert headers[b"second"] == {"ts_request_sequence_id": "s1"}
    assert headers[b"last"] == {"ts_request_sequence_id": "s1", "ts_request_sequence_end": "true"}
    # Jobs enter the queue in the client's order.
    assert [request_of(job).input["data"] for job in peer.queued] == [b"first", b"second", b"last"]
    assert all(job.streaming for job in peer.jobs)


async def test_stream2_reports_errors_in_stream_and_stays_open(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)

    async def script(job: Job) -> AsyncIterator[Reply]:
        if request_of(job).input["data"] == b"boom":
            yield failure(job, ErrorCode.HANDLER_FAILED, 400, "bad input")
        else:
            yield ok(job, request_of(job).input["data"])

    await responder(script)
    queue: asyncio.Queue[PredictionsRequest | None] = asyncio.Queue()

    async def requests() -> AsyncIterator[PredictionsRequest]:
        while (request := await queue.get()) is not None:
            yield request

    call = stub.StreamPredictions2(requests(), timeout=10)

    queue.put_nowait(data(b"no sequence"))
    missing = await read_message(call)
    assert missing.prediction == b""
    assert missing.status.code == grpc.StatusCode.INTERNAL.value[0]
    assert missing.status.message == "Parameter sequenceId is required."
    info = error_details_pb2.ErrorInfo()
    assert missing.status.details[0].Unpack(info)
    assert info.reason == "org.pytorch.serve.http.BadRequestException"

    queue.put_nowait(data(b"x", model="nope", sequence_id="s"))
    unknown = await read_message(call)
    assert unknown.status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert unknown.status.message == "Model not found: nope"
    assert unknown.sequence_id == "s"

    queue.put_nowait(data(b"boom", sequence_id="s"))
    handler_error = await read_message(call)
    assert handler_error.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert handler_error.status.message == "bad input"

    queue.put_nowait(data(b"still open", sequence_id="s"))
    assert (await read_message(call)).prediction == b"still open"
    queue.put_nowait(None)
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_stream2_completes_only_after_every_job_answered(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    release = asyncio.Event()

    async def slow(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield ok(job, b"late")

    peer = await responder(slow)
    call = stub.StreamPredictions2(iter([data(b"x", sequence_id="s")]), timeout=10)
    await peer.wait_for_jobs(1)
    await asyncio.sleep(0.1)
    assert not call.done()
    release.set()
    assert [r.prediction async for r in call] == [b"late"]


async def test_stream2_streaming_handler_interleaves_chunks(
    gateway: Gateway, stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    await responder(chunks(2))
    requests = [data(b"a", sequence_id="s"), data(b"b", sequence_id="t")]
    call = stub.StreamPredictions2(iter(requests), timeout=10)
    responses = [r async for r in call]
    by_sequence: dict[str, list[bytes]] = {}
    for response in responses:
        by_sequence.setdefault(response.sequence_id, []).append(response.prediction)
    assert by_sequence == {"s": [b"chunk-0", b"chunk-1", b"final"], "t": [b"chunk-0", b"chunk-1", b"final"]}
    assert gateway.replies.in_flight == 0
