"""The one REST error middleware, called without a server: bodies by API, routing errors, a dependency
that is down, unexpected errors, a broken stream, and the log context a request leaves behind."""

import json
from collections.abc import Callable

import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from sluice.errors import ErrorCode, SluiceError, Unavailable
from sluice.transport.http_errors import StreamBroken, TorchServeBodies, error_middleware
from sluice.transport.torchserve_http import empty_error

BODIES = TorchServeBodies(too_large=lambda: empty_error(413))


class Down(Exception):
    pass


def raising(exc: BaseException) -> Callable[[web.Request], object]:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise exc

    return handler


async def answer(exc: BaseException, path: str = "/predictions/m", **options: object) -> web.Response:
    middleware = error_middleware(BODIES, **options)  # type: ignore[arg-type]
    response = await middleware(make_mocked_request("POST", path), raising(exc))  # type: ignore[arg-type]
    assert isinstance(response, web.Response)
    return response


def body(response: web.Response) -> object:
    assert isinstance(response.body, bytes)
    return json.loads(response.body)


async def test_domain_errors_get_torchserve_bodies() -> None:
    response = await answer(SluiceError(ErrorCode.MODEL_NOT_FOUND, "Model not found: m"))
    assert (response.status, body(response)) == (
        404,
        {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: m"},
    )


async def test_unexpected_errors_are_a_generic_500() -> None:
    response = await answer(KeyError("secret detail"))
    assert (response.status, body(response)) == (
        500,
        {"code": 500, "type": "InternalServerException", "message": "Internal server error"},
    )


async def test_a_dependency_that_is_down_is_503_only_when_named() -> None:
    response = await answer(Down("refused"), unavailable=Unavailable((Down,), "registry unreachable"))
    assert (response.status, body(response)) == (
        503,
        {"code": 503, "type": "ServiceUnavailableException", "message": "registry unreachable"},
    )
    assert (await answer(Down("refused"))).status == 500


async def test_routing_errors_and_the_size_limit() -> None:
    not_found = await answer(web.HTTPNotFound())
    assert body(not_found) == {
        "code": 404,
        "type": "ResourceNotFoundException",
        "message": "Requested resource is not found, please refer to API document.",
    }
    too_large = await answer(web.HTTPRequestEntityTooLarge(max_size=1, actual_size=2))
    assert (too_large.status, too_large.body) == (413, None)


async def test_a_broken_stream_is_not_answered() -> None:
    with pytest.raises(StreamBroken):
        await answer(StreamBroken("lost"))


async def test_the_request_log_context_ends_with_the_request() -> None:
    structlog.contextvars.bind_contextvars(request_id="r", model="m", version="1", service="gateway")
    try:
        await answer(SluiceError(ErrorCode.QUEUE_FULL, "full"))
        assert structlog.contextvars.get_contextvars() == {"service": "gateway"}
    finally:
        structlog.contextvars.clear_contextvars()
