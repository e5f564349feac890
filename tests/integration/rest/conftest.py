"""REST integration fixtures: a real redis-server, the real gateway (gRPC, REST and metrics on free
ports), an aiohttp client, and the scripted responder standing in for workers (real workers: see
test_worker_rest.py)."""

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import pytest
from sluice.envelope import Job, Reply
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings
from tests.support.redis_server import RedisServer
from tests.support.responder import Responder, Script


def raw(
    job: Job,
    body: bytes,
    *,
    seq: int = 0,
    final: bool = True,
    status: int = 200,
    phrase: str = "",
    content_type: str = "",
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """A REST success reply: the payload is the response body itself."""
    return Reply(
        job_id=job.job_id,
        seq=seq,
        final=final,
        status_code=status,
        reason_phrase=phrase,
        payload=body,
        attempt=1,
        content_type=content_type,
        headers=dict(headers or {}),
    )


async def echo_body(job: Job) -> AsyncIterator[Reply]:
    yield raw(job, job.request)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
async def gateway(redis_server: RedisServer, settings_overrides: dict[str, Any]) -> AsyncIterator[Gateway]:
    gw = Gateway(make_settings(redis_server.url, **settings_overrides))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(grace_s=0)


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{gateway.rest_port}") as session:
        yield session


@pytest.fixture
async def metrics_http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{gateway.metrics_port}") as session:
        yield session


@pytest.fixture
async def responder(redis_server: RedisServer) -> AsyncIterator[Callable[..., Awaitable[Responder]]]:
    started: list[Responder] = []

    async def start(
        script: Script = echo_body, *, model: str = "echo", version: str = "1.0", **kw: Any
    ) -> Responder:
        peer = await Responder(redis_server.url, model, version, script, **kw).start()
        started.append(peer)
        return peer

    yield start
    for peer in started:
        await peer.stop()
