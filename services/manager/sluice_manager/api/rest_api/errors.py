"""Errors to HTTP, in one middleware (outermost: the token and model-API middlewares' errors map here
too). Domain errors map through :mod:`sluice.status_map`; routing errors get TorchServe's texts;
anything else is a bug: a generic 500, the traceback in the log."""

from collections.abc import Awaitable, Callable

from aiohttp import web
from redis.exceptions import RedisError
from sluice.errors import INTERNAL_MESSAGE, ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.torchserve_http import (
    error_body_response,
    error_response,
    request_id,
    routing_error,
)

log = get_logger(__name__)

REDIS_UNAVAILABLE = "Service unavailable: the registry is unreachable."

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _http_error(exc: web.HTTPException) -> web.StreamResponse:
    if exc.status == 413:
        return error_body_response(413, "RequestEntityTooLargeException", "Request body is too large.")
    return routing_error(exc)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        return _http_error(exc)
    except SluiceError as error:
        return error_response(error)
    except RedisError as exc:
        log.warning("redis unavailable", path=request.path, error=str(exc))
        return error_response(SluiceError(ErrorCode.UNAVAILABLE, REDIS_UNAVAILABLE))
    except Exception:
        log.exception("unexpected error", request_id=request_id(request), path=request.path)
        return error_response(SluiceError(ErrorCode.INTERNAL, INTERNAL_MESSAGE))
