"""Errors to HTTP, in one middleware (outermost, so the token middleware's errors map here too).

Domain errors (:class:`SluiceError`) map through :mod:`sluice.status_map`; routing errors get
TorchServe's texts; anything else is a bug: a generic 500, the traceback in the log. KServe v2 paths
(``/v2...``) answer ``{"error": "<message>"}`` as the v2 REST protocol specifies; every other path
answers TorchServe's ``{"code", "type", "message"}``.
"""

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from sluice import torchserve_http
from sluice.errors import INTERNAL_MESSAGE, ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.status_map import rest_status
from sluice.torchserve_http import METHOD_NOT_ALLOWED_MESSAGE, NOT_FOUND_MESSAGE, request_id

log = get_logger(__name__)

TOO_LARGE_MESSAGE = "Request body exceeds max_request_size."

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StreamBroken(Exception):
    """A failure after a streamed response started: the connection is dropped (no status to send)."""


def is_kserve_path(request: web.Request) -> bool:
    return request.path == "/v2" or request.path.startswith("/v2/")


def kserve_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _domain_error(request: web.Request, error: SluiceError) -> web.Response:
    if is_kserve_path(request):
        return kserve_error(rest_status(error), error.message)
    return torchserve_http.error_response(error)


def _http_error(request: web.Request, exc: web.HTTPException) -> web.StreamResponse:
    status = exc.status
    if not is_kserve_path(request):
        # TorchServe answers an oversized request with an empty 413.
        return torchserve_http.empty_error(413) if status == 413 else torchserve_http.routing_error(exc)
    if status == 404:
        return kserve_error(404, NOT_FOUND_MESSAGE)
    if status == 405:
        return kserve_error(405, METHOD_NOT_ALLOWED_MESSAGE)
    if status == 413:
        return kserve_error(413, TOO_LARGE_MESSAGE)
    if status >= 400:
        return kserve_error(status, exc.text or exc.reason)
    return exc


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        return _http_error(request, exc)
    except SluiceError as error:
        return _domain_error(request, error)
    except StreamBroken:
        raise
    except Exception:
        log.exception("unexpected error", request_id=request_id(request), path=request.path)
        return _domain_error(request, SluiceError(ErrorCode.INTERNAL, INTERNAL_MESSAGE))
    finally:
        structlog.contextvars.unbind_contextvars("request_id", "model", "version")
