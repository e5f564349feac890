"""Errors to gRPC statuses, for every rpc of the gateway's and the manager's services: a service is
registered through :func:`add_service`, which wraps each of its handlers, so no rpc can miss it.

Known failures arrive as :class:`SluiceError` and map through :mod:`sluice.transport.status_map`. Anything
else is a bug: the client gets INTERNAL with a generic message, the log gets the traceback and request id
(:func:`sluice.errors.as_sluice_error`). What differs between services is a parameter of
:class:`StatusMapping`: how details are written (TorchServe's ``"<message>\\n<java class>"``, or the bare
message for KServe v2) and which exceptions mean a dependency is down.

Wrapped once at registration rather than by a ``grpc.aio.ServerInterceptor``, which would run for
every call (a coroutine and a handler lookup per rpc, on the gateway's hot path).
"""

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import grpc

from sluice.errors import SluiceError, Unavailable, as_sluice_error
from sluice.transport.status_map import grpc_details, grpc_status

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]
# Not subscriptable at run time: the alias is a string.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
# How a status's details are written from the error.
Details = Callable[[SluiceError], str]


def plain_details(error: SluiceError) -> str:
    """The bare message (KServe v2 rpcs: no TorchServe exception class)."""
    return error.message


@dataclass(frozen=True, slots=True)
class StatusMapping:
    """How one service's rpcs report errors."""

    details: Details = grpc_details
    unavailable: Unavailable | None = None

    async def _abort(self, context: Context, exc: Exception, method: str) -> None:
        error = as_sluice_error(exc, self.unavailable, method=method)
        await context.abort(grpc_status(error), self.details(error))

    def unary(
        self, method: Callable[[Req, Context], Awaitable[Resp]]
    ) -> Callable[[Req, Context], Awaitable[Resp]]:
        """For unary-response methods (``Req`` is the request or the request iterator)."""

        @functools.wraps(method)
        async def wrapper(request: Req, context: Context) -> Resp:
            try:
                return await method(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._abort(context, exc, method.__name__)
                raise AssertionError("context.abort returned") from exc

        return wrapper

    def streaming(
        self, method: Callable[[Req, Context], AsyncIterator[Resp]]
    ) -> Callable[[Req, Context], AsyncIterator[Resp]]:
        """For server-streaming and bidirectional methods."""

        @functools.wraps(method)
        async def wrapper(request: Req, context: Context) -> AsyncIterator[Resp]:
            try:
                async for response in method(request, context):
                    yield response
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._abort(context, exc, method.__name__)

        return wrapper

    def guard(self, handler: Handler) -> Handler:
        """The same handler, its behaviour wrapped by :meth:`unary` or :meth:`streaming`."""
        # The stubs type a handler's behaviours for the blocking server; here they are coroutines.
        behaviors: Any = handler
        serializers = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if behaviors.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self.unary(behaviors.unary_unary), **serializers)
        if behaviors.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(self.unary(behaviors.stream_unary), **serializers)
        if behaviors.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(self.streaming(behaviors.unary_stream), **serializers)
        return grpc.stream_stream_rpc_method_handler(self.streaming(behaviors.stream_stream), **serializers)


def add_service(
    server: grpc.aio.Server,
    service_names: Iterable[str],
    handlers: Mapping[str, Handler],
    mapping: StatusMapping,
) -> None:
    """Serve ``handlers`` (method name -> handler) under each service name, every handler guarded by
    ``mapping``; methods not listed answer UNIMPLEMENTED."""
    guarded = {name: mapping.guard(handler) for name, handler in handlers.items()}
    for service in service_names:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, guarded),))
        # grpc >= 1.62 (looked up without the generic handlers); types-grpcio does not declare it yet.
        server.add_registered_method_handlers(service, guarded)  # type: ignore[attr-defined]
