"""Error bodies and codes on the inference port: TorchServe's {"code", "type", "message"} with the
HTTP status equal to code, and nothing enqueued when the gateway refuses a request."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.errors import ErrorCode, no_worker_message
from sluice.redis import keys

from tests.integration.gateway.conftest import register
from tests.support.responder import failure


async def error_of(resp: aiohttp.ClientResponse) -> tuple[int, dict[str, Any]]:
    raw = await resp.read()
    assert raw.endswith(b"}\n")
    assert b'\n  "code": ' in raw
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.headers["Connection"] == "close"
    assert "x-request-id" in resp.headers
    body = json.loads(raw)
    assert list(body) == ["code", "type", "message"]
    assert body["code"] == resp.status
    return resp.status, body


async def test_unknown_model_and_version(http: aiohttp.ClientSession, redis_client: aioredis.Redis) -> None:
    async with http.post("/predictions/nope", data=b"x") as resp:
        assert await error_of(resp) == (
            404,
            {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: nope"},
        )
    await register(redis_client)
    async with http.post("/predictions/echo/9.9", data=b"x") as resp:
        status, body = await error_of(resp)
        assert (status, body["type"]) == (404, "ModelVersionNotFoundException")
        assert body["message"] == "Model version: 9.9 does not exist for model: echo"


async def test_unknown_path_and_wrong_method(http: aiohttp.ClientSession) -> None:
    for path in ("/nothing", "/predictions", "/v1/models/echo"):
        async with http.get(path) as resp:
            status, body = await error_of(resp)
            assert (status, body["type"]) == (404, "ResourceNotFoundException")
            assert body["message"] == "Requested resource is not found, please refer to API document."
    async with http.get("/") as resp:  # "/" only answers OPTIONS
        status, body = await error_of(resp)
        assert (status, body["type"]) == (405, "MethodNotAllowedException")
        assert body["message"] == "Requested method is not allowed, please refer to API document."


@pytest.mark.parametrize("settings_overrides", [{"max_request_size": 1000}])
async def test_oversized_request_is_413_and_never_queued(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    await register(redis_client)
    peer = await responder()
    async with http.post("/predictions/echo", data=b"x" * 1001) as resp:
        assert resp.status == 413
        assert await resp.read() == b""  # TorchServe answers an empty 413
    async with http.post("/predictions/echo", data=b"x" * 1000) as resp:
        assert resp.status == 200
    assert len(peer.jobs) == 1


async def test_queue_full_is_503_with_nothing_enqueued(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    release = asyncio.Event()

    async def held(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield Reply(job_id=job.job_id, final=True, status_code=200, payload=b"done", attempt=1)

    await register(redis_client, job_queue_size=1)
    peer = await responder(held)
    first = asyncio.create_task(http.post("/predictions/echo", data=b"1"))
    await peer.wait_for_jobs(1)
    async with http.post("/predictions/echo", data=b"2") as resp:
        status, body = await error_of(resp)
    assert (status, body["type"], body["message"]) == (
        503,
        "ServiceUnavailableException",
        no_worker_message("echo"),
    )
    assert await redis_client.xlen(keys.job_stream("echo", "1.0")) == 1
    release.set()
    async with await first as resp:
        assert await resp.read() == b"done"


async def test_no_worker_is_503(http: aiohttp.ClientSession, redis_client: aioredis.Redis) -> None:
    await register(redis_client)
    async with http.post("/predictions/echo", data=b"x") as resp:
        status, body = await error_of(resp)
    assert (status, body["type"]) == (503, "ServiceUnavailableException")


@pytest.mark.parametrize(
    ("code", "status", "message", "expected_status"),
    [
        (ErrorCode.HANDLER_FAILED, 400, "bad input", 400),
        (ErrorCode.HANDLER_FAILED, 503, "Prediction failed", 503),
        (ErrorCode.HANDLER_FAILED, 413, "too big for the model", 507),  # TorchServe's remap
        (ErrorCode.WORKER_DIED, 500, "Worker died.", 500),
    ],
)
async def test_worker_failures_keep_the_handler_status(  # type: ignore[no-untyped-def]
    http, redis_client, responder, code, status, message, expected_status
) -> None:
    async def fail(job: Job) -> AsyncIterator[Reply]:
        yield failure(job, code, status, message)

    await register(redis_client)
    await responder(fail)
    async with http.post("/predictions/echo", data=b"x") as resp:
        got_status, body = await error_of(resp)
    assert (got_status, body["type"], body["message"]) == (
        expected_status,
        "InternalServerException",
        message,
    )
