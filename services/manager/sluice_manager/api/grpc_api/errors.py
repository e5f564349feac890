"""Domain errors to gRPC statuses, in one place: every servicer method is wrapped at registration.

Known failures arrive as :class:`SluiceError` and map through :mod:`sluice.status_map` (details in
TorchServe's ``"<message>\\n<java exception class>"`` form). Anything else is a bug: the client gets
INTERNAL with a generic message, the log gets the traceback.
"""

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from redis.exceptions import RedisError
from sluice.errors import INTERNAL_MESSAGE, ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.status_map import grpc_details, grpc_status

log = get_logger(__name__)

REDIS_UNAVAILABLE = "Service unavailable: the registry is unreachable."

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = Any  # grpc.aio.ServicerContext (grpc ships no type information)


def as_sluice_error(exc: Exception, method: str) -> SluiceError:
    """``exc`` as a client-safe error; unexpected ones are logged with their traceback."""
    if isinstance(exc, SluiceError):
        return exc
    if isinstance(exc, RedisError):
        log.warning("redis unavailable", method=method, error=str(exc))
        return SluiceError(ErrorCode.UNAVAILABLE, REDIS_UNAVAILABLE)
    log.exception("unexpected error", method=method)
    return SluiceError(ErrorCode.INTERNAL, INTERNAL_MESSAGE)


def unary(method: Callable[[Req, Context], Awaitable[Resp]]) -> Callable[[Req, Context], Awaitable[Resp]]:
    @functools.wraps(method)
    async def wrapper(request: Req, context: Context) -> Resp:
        try:
            return await method(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            error = as_sluice_error(exc, method.__name__)
            await context.abort(grpc_status(error), grpc_details(error))
            raise AssertionError("context.abort returned") from exc

    return wrapper
