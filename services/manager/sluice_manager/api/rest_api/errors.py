"""How the management port reports errors (:func:`sluice.transport.http_errors.error_middleware`):
TorchServe's bodies, a body over the size limit answered with TorchServe's RequestEntityTooLargeException,
and a Redis that does not answer as 503."""

from aiohttp import web
from redis.exceptions import RedisError
from sluice.errors import Unavailable
from sluice.transport.http_errors import TorchServeBodies, error_middleware
from sluice.transport.torchserve_http import error_body_response

REDIS_UNAVAILABLE = "Service unavailable: the registry is unreachable."


def _too_large() -> web.Response:
    return error_body_response(413, "RequestEntityTooLargeException", "Request body is too large.")


management_error_middleware = error_middleware(
    TorchServeBodies(too_large=_too_large), Unavailable((RedisError,), REDIS_UNAVAILABLE)
)
