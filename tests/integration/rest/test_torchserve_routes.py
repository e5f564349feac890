"""TorchServe's REST inference API against the real gateway, with a scripted stand-in worker: routes,
what the job carries, TorchServe's headers and the handler's status/headers on the response."""

import json
from collections.abc import AsyncIterator

import aiohttp
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply, WireProtocol
from sluice_gateway.torchserve.openapi import api_description

from tests.integration.gateway.conftest import register
from tests.integration.rest.conftest import raw

CACHE = {
    "Pragma": "no-cache",
    "Cache-Control": "no-cache; no-store, must-revalidate, private",
    "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
}


async def test_ping_healthy_then_unhealthy(http: aiohttp.ClientSession, redis_client: aioredis.Redis) -> None:
    async with http.get("/ping") as resp:
        assert resp.status == 200
        assert await resp.read() == b'{\n  "status": "Healthy"\n}\n'
        assert resp.headers["Content-Type"] == "application/json"
        assert all(resp.headers[k] == v for k, v in CACHE.items())
    await register(redis_client, min_workers=1)  # no worker alive: below min_workers
    async with http.get("/ping") as resp:
        assert resp.status == 500
        assert json.loads(await resp.read()) == {"status": "Unhealthy"}


async def test_prediction_carries_body_and_headers(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    await register(redis_client)
    peer = await responder()
    async with http.post(
        "/predictions/echo",
        data=b"\x00raw",
        headers={"Content-Type": "application/x-thing", "X-Mixed-Case": "v"},
    ) as resp:
        assert resp.status == 200
        assert resp.reason == ""  # TorchServe's status line: "HTTP/1.1 200 "
        assert await resp.read() == b"\x00raw"
        assert "Content-Type" not in resp.headers  # only when the handler sets one
        assert all(resp.headers[k] == v for k, v in CACHE.items())
        request_id = resp.headers["x-request-id"]
    (job,) = peer.jobs
    assert job.job_id == request_id
    assert job.protocol == WireProtocol.TORCHSERVE_REST
    assert not job.streaming  # batchable: the handler decides whether it streams
    assert job.request == b"\x00raw"
    assert job.headers["Content-Type"] == "application/x-thing"
    assert job.headers["X-Mixed-Case"] == "v"
    assert job.headers["url_path"] == ""
    assert job.headers["explain"] == "False"


async def test_routes_set_version_url_path_and_explain(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    await register(redis_client, version="1.0")
    await register(redis_client, version="2.0", default=False)
    one = await responder(version="1.0")
    two = await responder(version="2.0", worker_id="9001")
    for path in (
        "/predictions/echo/2.0/extra/path",
        "/explanations/echo",
        "/explanations/echo/2.0",
        "/v1/models/echo:predict",
        "/v1/models/echo:explain",
    ):
        async with http.put(path, data=b"x") as resp:  # TorchServe does not check the method
            assert resp.status == 200, path
    jobs = sorted([*one.jobs, *two.jobs], key=lambda j: j.enqueued_unix_ms)
    seen = [(j.model_version, j.headers.get("url_path"), j.headers["explain"]) for j in jobs]
    assert seen == [
        ("2.0", "extra/path", "False"),
        ("1.0", "", "True"),
        ("2.0", "", "True"),
        ("1.0", None, "False"),
        ("1.0", None, "True"),
    ]


async def test_handler_status_phrase_headers_and_content_type(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    async def teapot(job: Job) -> AsyncIterator[Reply]:
        yield raw(
            job,
            b"short and stout",
            status=418,
            phrase="I'm a teapot",
            content_type="text/plain",
            headers={"x-echo": "yes"},
        )

    await register(redis_client)
    await responder(teapot)
    async with http.post("/predictions/echo", data=b"") as resp:
        assert (resp.status, resp.reason) == (418, "I'm a teapot")
        assert resp.headers["Content-Type"] == "text/plain"
        assert resp.headers["x-echo"] == "yes"
        assert await resp.read() == b"short and stout"


async def test_streaming_is_chunked_with_ts_stream_next(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    async def chunks(job: Job) -> AsyncIterator[Reply]:
        for i in range(3):
            yield raw(job, f"chunk-{i}".encode(), seq=i, final=False, headers={"ts_stream_next": "true"})
        yield raw(job, b"final", seq=3, headers={"ts_stream_next": "false"})

    await register(redis_client)
    await responder(chunks)
    async with http.post("/predictions/echo", data=b"") as resp:
        assert resp.status == 200
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert resp.headers["ts_stream_next"] == "true"
        assert "x-request-id" in resp.headers
        assert await resp.read() == b"chunk-0chunk-1chunk-2final"


async def test_api_description_is_served(http) -> None:  # type: ignore[no-untyped-def]
    # The document's validity is checked in tests/unit/gateway/test_openapi.py.
    for method, path in (("OPTIONS", "/"), ("GET", "/api-description")):
        async with http.request(method, path) as resp:
            assert resp.status == 200
            assert json.loads(await resp.read()) == api_description()


async def test_options_on_a_model_describes_it(http, redis_client) -> None:  # type: ignore[no-untyped-def]
    await register(redis_client)
    async with http.options("/predictions/echo") as resp:
        assert resp.status == 200
        assert json.loads(await resp.read()) == api_description("echo")
    async with http.options("/predictions/nope") as resp:
        assert resp.status == 404
