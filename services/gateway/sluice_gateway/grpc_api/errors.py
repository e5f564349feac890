"""Domain errors to gRPC, in one place: every servicer method is wrapped by one of these wrappers at
registration, and StreamPredictions2's in-stream statuses are built here too.

Known failures arrive as :class:`SluiceError` and map through :mod:`sluice.status_map`. Anything else
is a bug: the client gets INTERNAL with a generic message, the log gets the traceback and request id.
"""

import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from sluice.errors import INTERNAL_MESSAGE, ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.status_map import grpc_details, grpc_status

log = get_logger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = Any  # grpc.aio.ServicerContext (grpc ships no type information)
# How a status's details are written: TorchServe's "<message>\n<java class>" by default; KServe v2
# rpcs send the bare message (``plain_details``).
Details = Callable[[SluiceError], str]


def plain_details(error: SluiceError) -> str:
    return error.message


def as_sluice_error(exc: Exception) -> SluiceError:
    """``exc`` as a client-safe error; unexpected exceptions are logged with their traceback.
    Call it from inside the ``except`` block that caught ``exc``."""
    if isinstance(exc, SluiceError):
        return exc
    request_id = structlog.contextvars.get_contextvars().get("request_id") or uuid.uuid4().hex
    log.exception("unexpected error", request_id=request_id)
    return SluiceError(ErrorCode.INTERNAL, INTERNAL_MESSAGE)


async def _abort(context: Context, exc: Exception, details: Details = grpc_details) -> None:
    error = as_sluice_error(exc)
    await context.abort(grpc_status(error), details(error))


def unary(
    method: Callable[[Req, Context], Awaitable[Resp]], details: Details = grpc_details
) -> Callable[[Req, Context], Awaitable[Resp]]:
    @functools.wraps(method)
    async def wrapper(request: Req, context: Context) -> Resp:
        try:
            return await method(request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, details)
            raise AssertionError("context.abort returned") from exc

    return wrapper


def streaming(
    method: Callable[[Req, Context], AsyncIterator[Resp]], details: Details = grpc_details
) -> Callable[[Req, Context], AsyncIterator[Resp]]:
    """For server-streaming and bidirectional methods (``Req`` is the request or the request iterator)."""

    @functools.wraps(method)
    async def wrapper(request: Req, context: Context) -> AsyncIterator[Resp]:
        try:
            async for response in method(request, context):
                yield response
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, details)

    return wrapper


def in_stream_status(error: SluiceError, code: grpc.StatusCode | None = None) -> status_pb2.Status:
    """TorchServe's in-stream error: ``google.rpc.Status`` with the gRPC code, the message and an
    ``ErrorInfo`` whose reason is the Java exception class. ``code`` overrides the mapped code."""
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=error.exception_class))
    status_code = code if code is not None else grpc_status(error)
    return status_pb2.Status(code=status_code.value[0], message=error.message, details=[info])
