"""Predictions and Ping over a real grpc.aio server and a real redis-server."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import pytest
import redis.asyncio as aioredis
from google.protobuf.empty_pb2 import Empty
from sluice.envelope import Job, Reply, WireProtocol
from sluice.errors import ErrorCode, no_worker_message
from sluice.redis import keys
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import register
from tests.support.eventually import eventually
from tests.support.responder import Responder, failure, fixed, ok, request_of

if TYPE_CHECKING:
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
UNAVAILABLE_CLASS = "org.pytorch.serve.http.ServiceUnavailableException"
PREDICTIONS = "/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"


def data(value: bytes, model: str = "echo", version: str = "") -> PredictionsRequest:
    return PredictionsRequest(model_name=model, model_version=version, input={"data": value})


async def test_ping_is_healthy_without_models(stub: "InferenceAPIsServiceAsyncStub") -> None:
    response = await stub.Ping(Empty())
    assert response.health == '{\n  "status": "Healthy"\n}'
    assert response.health == json.dumps({"status": "Healthy"}, indent=2)


async def test_ping_is_unhealthy_while_a_default_version_lacks_workers(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, min_workers=1)
    call = stub.Ping(Empty())
    assert (await call).health == '{\n  "status": "Unhealthy"\n}'
    assert await call.code() == grpc.StatusCode.OK
    await responder()
    assert (await stub.Ping(Empty())).health == '{\n  "status": "Healthy"\n}'


async def test_predictions_round_trip_is_byte_exact(
    channel: grpc.aio.Channel, gateway: Gateway, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    # A worker-built response with a field the gateway does not know must come back untouched.
    payload = PredictionResponse(prediction=b"\x00\x01\xffresult").SerializeToString() + b"\xa2\x06\x03xyz"

    async def script(job: Job) -> AsyncIterator[Reply]:
        yield Reply(job_id=job.job_id, final=True, status_code=200, payload=payload, attempt=1)

    peer = await responder(script)
    raw_request = data(b"hello").SerializeToString()
    # No (de)serializers: raw bytes both ways.
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PREDICTIONS)
    response = await call(raw_request, timeout=10)
    assert response == payload

    (job,) = peer.jobs
    assert job.request == raw_request
    assert job.protocol == WireProtocol.TORCHSERVE_GRPC
    assert (job.model_name, job.model_version) == ("echo", "1.0")
    assert job.reply_to == keys.reply_stream(gateway.settings.gateway_id)
    assert len(job.job_id) == 32
    assert not job.streaming
    # The client deadline travels with the job (grpc-timeout rounds up a little).
    assert 9_000 <= job.deadline_unix_ms - job.enqueued_unix_ms <= 10_500


async def test_predictions_uses_the_default_or_the_requested_version(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, version="1.0", default=True)
    await register(redis_client, version="2.0", default=False)
    await responder(fixed(lambda job: ok(job, b"v1")), version="1.0")
    await responder(fixed(lambda job: ok(job, b"v2")), version="2.0", worker_id="9001")
    assert (await stub.Predictions(data(b"x"))).prediction == b"v1"
    assert (await stub.Predictions(data(b"x", version="2.0"))).prediction == b"v2"


async def test_a_call_without_deadline_waits_the_versions_response_timeout(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, response_timeout_s=7)
    peer = await responder()
    await stub.Predictions(data(b"x"))
    assert peer.jobs[0].deadline_unix_ms - peer.jobs[0].enqueued_unix_ms == 7_000


@pytest.mark.parametrize(
    ("request_", "code", "details"),
    [
        (
            PredictionsRequest(input={"data": b"x"}),
            grpc.StatusCode.INVALID_ARGUMENT,
            "Parameter model_name is required.\norg.pytorch.serve.http.BadRequestException",
        ),
        (
            data(b"x", model="nope"),
            grpc.StatusCode.NOT_FOUND,
            "Model not found: nope\norg.pytorch.serve.archive.model.ModelNotFoundException",
        ),
        (
            data(b"x", version="9.9"),
            grpc.StatusCode.NOT_FOUND,
            "Model version: 9.9 does not exist for model: echo\n"
            "org.pytorch.serve.archive.model.ModelVersionNotFoundException",
        ),
        (
            data(b"x", model="bad{name}"),
            grpc.StatusCode.NOT_FOUND,
            "Model not found: bad{name}\norg.pytorch.serve.archive.model.ModelNotFoundException",
        ),
        (
            data(b"x", version="1:0"),
            grpc.StatusCode.NOT_FOUND,
            "Model version: 1:0 does not exist for model: echo\n"
            "org.pytorch.serve.archive.model.ModelVersionNotFoundException",
        ),
    ],
)
async def test_request_errors(
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    request_: PredictionsRequest,
    code: grpc.StatusCode,
    details: str,
) -> None:
    await register(redis_client)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(request_)
    assert caught.value.code() == code
    assert caught.value.details() == details


async def test_no_worker_is_unavailable_with_torchserves_message(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis
) -> None:
    await register(redis_client)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(data(b"x"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == f"{no_worker_message('echo')}\n{UNAVAILABLE_CLASS}"
    assert await redis_client.xlen(keys.job_stream("echo", "1.0")) == 0


async def test_full_queue_is_rejected_at_once_and_nothing_is_enqueued(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, job_queue_size=2)
    release = asyncio.Event()

    async def hold(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield ok(job, b"done")

    peer = await responder(hold)
    held = [asyncio.ensure_future(stub.Predictions(data(b"x"), timeout=10)) for _ in range(2)]
    await peer.wait_for_jobs(2)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(data(b"x"), timeout=2)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (caught.value.details() or "").startswith('Model "echo" has no worker to serve inference request.')
    assert await redis_client.xlen(keys.job_stream("echo", "1.0")) == 2
    release.set()
    assert [r.prediction for r in await asyncio.gather(*held)] == [b"done", b"done"]


@pytest.mark.parametrize(
    ("code", "status", "message", "grpc_code"),
    [
        (ErrorCode.HANDLER_FAILED, 400, "bad input", grpc.StatusCode.INVALID_ARGUMENT),
        (ErrorCode.HANDLER_FAILED, 404, "no such thing", grpc.StatusCode.NOT_FOUND),
        (ErrorCode.HANDLER_FAILED, 503, "Prediction failed", grpc.StatusCode.UNAVAILABLE),
        (ErrorCode.HANDLER_FAILED, 507, "Out of resources", grpc.StatusCode.INTERNAL),
        (ErrorCode.WORKER_DIED, 500, "Worker died.", grpc.StatusCode.INTERNAL),
    ],
)
async def test_failure_replies_map_to_grpc_status(
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    responder: Start,
    code: ErrorCode,
    status: int,
    message: str,
    grpc_code: grpc.StatusCode,
) -> None:
    await register(redis_client)
    await responder(fixed(lambda job: failure(job, code, status, message)))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(data(b"x"), timeout=10)
    assert caught.value.code() == grpc_code
    assert caught.value.details() == f"{message}\norg.pytorch.serve.http.InternalServerException"


async def test_duplicate_replies_are_dropped(
    gateway: Gateway, stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    # A redelivered job answers twice (and an intermediate reply slips into a unary call).
    await responder(
        fixed(
            lambda job: ok(job, b"partial", final=False),
            lambda job: ok(job, b"first", seq=1),
            lambda job: ok(job, b"second", attempt=2),
            lambda job: failure(job, ErrorCode.WORKER_DIED, 500, "Worker died.", attempt=3),
        )
    )
    assert (await stub.Predictions(data(b"x"), timeout=10)).prediction == b"first"
    assert (await stub.Predictions(data(b"y"), timeout=10)).prediction == b"first"
    # Consumed replies are trimmed; no waiter is left behind.
    stream = keys.reply_stream(gateway.settings.gateway_id)

    async def trimmed() -> bool:
        return await redis_client.xlen(stream) == 0

    await eventually(trimmed)
    assert gateway.replies.in_flight == 0


async def test_requests_with_inputs_reach_the_worker_undecoded(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    peer = await responder()
    request = PredictionsRequest(model_name="echo", input={"data": b"\x00bin", "other": b"{}"})
    await stub.Predictions(request, metadata=(("protocol", "gRPC"), ("session_id", "12345")))
    assert dict(request_of(peer.jobs[0]).input) == {"data": b"\x00bin", "other": b"{}"}
    assert not peer.jobs[0].headers


@pytest.mark.parametrize("settings_overrides", [{"max_request_size": 1000}])
async def test_requests_over_max_request_size_are_refused(
    settings_overrides: dict[str, object],
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    responder: Start,
) -> None:
    await register(redis_client)
    peer = await responder()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(data(b"x" * 2000), timeout=5)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await stub.Predictions(data(b"x" * 500), timeout=5)).prediction == b"x" * 500
    assert len(peer.jobs) == 1
