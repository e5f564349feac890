"""Deadlines and cancellation: the client gets DEADLINE_EXCEEDED / CANCELLED, the job gets a cancel
flag for the workers, the waiter is released and a late reply is dropped."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.redis import keys
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import register
from tests.support.eventually import eventually
from tests.support.grpc_calls import read_message
from tests.support.redis_server import RedisServer
from tests.support.responder import Responder, ok

if TYPE_CHECKING:
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
REQUEST = PredictionsRequest(model_name="echo", input={"data": b"x"})


def held(release: asyncio.Event) -> Callable[[Job], AsyncIterator[Reply]]:
    async def script(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield ok(job, b"late")

    return script


async def wait_for_key(redis: aioredis.Redis, key: str, timeout_s: float = 3.0) -> int:
    """The key's remaining TTL in ms once it exists."""

    async def exists() -> bool:
        return bool(await redis.exists(key))

    await eventually(exists, timeout_s)
    ttl_ms: int = await redis.pttl(key)
    return ttl_ms


async def wait_until_idle(gateway: Gateway) -> None:
    await eventually(lambda: gateway.replies.in_flight == 0)


async def test_client_deadline_gives_deadline_exceeded_and_sets_the_cancel_flag(
    gateway: Gateway, stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    release = asyncio.Event()
    peer = await responder(held(release))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(REQUEST, timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    (job,) = peer.jobs
    ttl_ms = await wait_for_key(redis_client, keys.cancel("echo", "1.0", job.job_id))
    assert 0 < ttl_ms <= 60_000 + 1_000
    await wait_until_idle(gateway)
    # The late reply is dropped; the gateway keeps answering.
    release.set()
    assert (await stub.Predictions(REQUEST, timeout=5)).prediction == b"late"


@pytest.mark.parametrize("settings_overrides", [{"default_request_timeout_s": 0.3}])
async def test_default_timeout_without_client_deadline(
    settings_overrides: dict[str, Any],
    gateway: Gateway,
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    responder: Start,
) -> None:
    await register(redis_client)
    peer = await responder(held(asyncio.Event()))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Predictions(REQUEST)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert caught.value.details() == (
        "Timed out waiting for the model's response.\norg.pytorch.serve.http.RequestTimeoutException"
    )
    await wait_for_key(redis_client, keys.cancel("echo", "1.0", peer.jobs[0].job_id))
    await wait_until_idle(gateway)


async def test_client_cancel_sets_the_cancel_flag_and_releases_the_waiter(
    gateway: Gateway, stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    peer = await responder(held(asyncio.Event()))
    call = stub.Predictions(REQUEST, timeout=30)
    (job,) = await peer.wait_for_jobs(1)
    assert gateway.replies.in_flight == 1
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    ttl_ms = await wait_for_key(redis_client, keys.cancel("echo", "1.0", job.job_id))
    assert ttl_ms > 25_000  # the job's remaining deadline plus the margin
    await wait_until_idle(gateway)


async def test_cancelled_stream_sets_the_cancel_flag(
    gateway: Gateway, stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)

    async def first_chunk_then_hang(job: Job) -> AsyncIterator[Reply]:
        yield ok(job, b"chunk", final=False)
        await asyncio.Event().wait()
        yield ok(job, b"never", seq=1)

    peer = await responder(first_chunk_then_hang)
    call = stub.StreamPredictions(REQUEST, timeout=30)
    assert (await read_message(call)).prediction == b"chunk"
    call.cancel()
    await wait_for_key(redis_client, keys.cancel("echo", "1.0", peer.jobs[0].job_id))
    await wait_until_idle(gateway)


async def test_a_job_the_client_gave_up_on_is_skipped_by_workers(
    redis_server: RedisServer,
    stub: "InferenceAPIsServiceAsyncStub",
    redis_client: aioredis.Redis,
    responder: Start,
) -> None:
    """The flag the gateway sets is the one the worker contract checks."""
    await register(redis_client)
    # A worker announced itself but is not reading yet: the job waits in the queue past its deadline.
    idle = Responder(redis_server.url, "echo", "1.0")
    await idle.announce()
    await idle.redis.aclose()
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Predictions(REQUEST, timeout=0.3)
    peer = await responder()
    await eventually(lambda: bool(peer.skipped))
    assert peer.jobs == []
