"""REST lifecycle: a client that disconnects cancels its job for the workers; a graceful stop lets
in-flight requests finish and refuses new connections; a unix: address works."""

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.redis import keys
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings, register
from tests.integration.rest.conftest import raw
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer


async def test_client_disconnect_sets_the_cancel_flag(http, redis_client: aioredis.Redis, responder) -> None:  # type: ignore[no-untyped-def]
    never = asyncio.Event()

    async def hang(job: Job) -> AsyncIterator[Reply]:
        await never.wait()
        yield raw(job, b"")

    await register(redis_client)
    peer = await responder(hang)
    request = asyncio.create_task(http.post("/predictions/echo", data=b"x"))
    (job,) = await peer.wait_for_jobs(1)
    request.cancel()  # the client goes away: the connection closes
    cancel_key = keys.cancel("echo", "1.0", job.job_id)

    async def flagged() -> bool:
        return bool(await redis_client.exists(cancel_key))

    await eventually(flagged)


async def test_graceful_stop_finishes_in_flight_requests(  # type: ignore[no-untyped-def]
    redis_server: RedisServer, redis_client: aioredis.Redis, responder
) -> None:
    release = asyncio.Event()

    async def slow(job: Job) -> AsyncIterator[Reply]:
        await release.wait()
        yield raw(job, b"finished")

    gateway = Gateway(make_settings(redis_server.url))
    await gateway.start()
    await register(redis_client)
    peer = await responder(slow)
    base = f"http://127.0.0.1:{gateway.rest_port}"
    async with aiohttp.ClientSession(base) as session:
        in_flight = asyncio.create_task(session.post("/predictions/echo", data=b"x"))
        await peer.wait_for_jobs(1)
        stopping = asyncio.create_task(gateway.stop(grace_s=10))
        await asyncio.sleep(0.3)
        assert not stopping.done()
        async with aiohttp.ClientSession(base) as fresh:
            try:
                async with fresh.get("/ping") as resp:
                    raise AssertionError(f"a new request was served during shutdown: {resp.status}")
            except aiohttp.ClientConnectionError:
                pass
        release.set()
        async with await in_flight as resp:
            assert resp.status == 200
            assert await resp.read() == b"finished"
        await asyncio.wait_for(stopping, 10)


async def test_unix_socket_address(redis_server: RedisServer, tmp_path: Path) -> None:
    path = tmp_path / "inference.sock"
    gateway = Gateway(make_settings(redis_server.url, inference_address=f"unix:{path}"))
    await gateway.start()
    try:
        connector = aiohttp.UnixConnector(path=str(path))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get("http://x/ping") as resp,
        ):
            assert resp.status == 200
    finally:
        await gateway.stop(grace_s=0)
