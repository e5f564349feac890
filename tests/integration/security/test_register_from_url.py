"""Registering from a URL through a real manager process (model API on, ``allowed_urls`` naming a
local HTTP server that counts requests): an allowed URL registers; disallowed ones get TorchServe's
answers and fetch nothing; the model store is never written to."""

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.integration.security.test_download import CountingServer
from tests.support import management_stack
from tests.support.models import echo_model, write_mar
from tests.support.redis_server import RedisServer


@pytest.fixture
async def archive_server(tmp_path: Path) -> AsyncIterator[CountingServer]:
    mar = write_mar(echo_model("remote"), tmp_path / "served").read_bytes()
    server = await CountingServer().start()

    async def serve_mar(request: web.Request) -> web.StreamResponse:
        return web.Response(body=mar)

    server.routes["/models/remote.mar"] = serve_mar
    yield server
    await server.stop()


async def test_register_from_url_follows_allowed_urls(
    redis_server: RedisServer, archive_server: CountingServer, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    manager = management_stack.start_manager(
        redis_server.url,
        tmp_path,
        allowed_urls=rf"http://127\.0\.0\.1:{archive_server.port}/models/.*",
        allowed_url_networks="127.0.0.1/32",
    )
    try:
        async with aiohttp.ClientSession(manager.rest_url) as rest:
            allowed = archive_server.url("/models/remote.mar")
            async with rest.post("/models", params={"url": allowed, "initial_workers": "0"}) as response:
                body = await response.json()
                assert response.status == 200, body
                assert body["status"].startswith(
                    'Model "remote" Version: 1.0 registered with 0 initial workers'
                )
            assert archive_server.hits == ["/models/remote.mar"]

            refused = {
                archive_server.url("/elsewhere/remote.mar"): (404, "does not match any allowed URL(s)"),
                archive_server.url("/models/../models/remote.mar"): (404, "Relative path is not allowed"),
                archive_server.url("/models/remote.mar", host="localhost"): (404, "does not match"),
                "file:///etc/passwd": (404, "does not match any allowed URL(s)"),
                "http://169.254.169.254/latest/meta-data/": (404, "does not match any allowed URL(s)"),
            }
            for url, (status, text) in refused.items():
                async with rest.post("/models", params={"url": url}) as response:
                    body = await response.json()
                    assert (response.status, body["type"]) == (status, "ModelNotFoundException"), (url, body)
                    assert text in body["message"]
            assert archive_server.hits == ["/models/remote.mar"]
        assert list((tmp_path / "store").iterdir()) == []
    finally:
        manager.service.stop()
