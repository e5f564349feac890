"""The manager's error mappers (REST and gRPC) never pass on a stack trace, an exception text or an
internal path, even when every service call fails unexpectedly with all of those in its message."""

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from sluice_manager.api.grpc_api.server import ManagementGrpcServer
from sluice_manager.api.rest_api.server import create_app

from tests.integration.security.test_error_bodies import SECRET, assert_clean
from tests.support.token_matrix import Method, call_raw

MGMT = "/org.pytorch.serve.grpc.management.ManagementAPIsService"


class ExplodingService:
    """A ManagementService whose every call fails with a traceback-like message."""

    config = SimpleNamespace(model_api_enabled=True)

    def __getattr__(self, name: str) -> Any:
        async def explode(*args: object, **kwargs: object) -> None:
            raise RuntimeError(SECRET)

        return explode


@pytest.fixture
async def rest() -> AsyncIterator[aiohttp.ClientSession]:
    runner = web.AppRunner(create_app(ExplodingService(), max_request_size=1 << 20))  # type: ignore[arg-type]
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    async with aiohttp.ClientSession(f"http://127.0.0.1:{runner.addresses[0][1]}") as session:
        yield session
    await runner.cleanup()


@pytest.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    server = ManagementGrpcServer(ExplodingService(), host="127.0.0.1", port=0, max_request_size=1 << 20)  # type: ignore[arg-type]
    port = await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as chan:
        yield chan
    await server.stop(0)


async def test_rest_error_bodies_stay_clean(rest: aiohttp.ClientSession) -> None:
    cases = [
        ("GET", "/models"),
        ("POST", "/models?url=x.mar"),
        ("GET", "/models/m"),
        ("PUT", "/models/m?min_worker=1"),
        ("DELETE", "/models/m/1"),
        ("PUT", "/models/m/1/set-default"),
        ("PUT", "/models/m/set-weights"),
        ("GET", "/v1/models/m"),
        ("GET", "/no/such/route"),
    ]
    statuses = set()
    for method, path in cases:
        async with rest.request(method, path) as response:
            statuses.add(response.status)
            assert_clean(await response.text())
    assert 500 in statuses


async def test_grpc_details_stay_clean(channel: grpc.aio.Channel) -> None:
    codes = set()
    for name in (
        "ListModels",
        "DescribeModel",
        "RegisterModel",
        "ScaleWorker",
        "SetDefault",
        "UnregisterModel",
    ):
        for request in (b"\n\x01m", b"\xff\xff\xff"):
            code, details = await call_raw(channel, Method(f"{MGMT}/{name}"), (), request=request)
            codes.add(code)
            assert_clean(details)
    assert grpc.StatusCode.INTERNAL in codes
