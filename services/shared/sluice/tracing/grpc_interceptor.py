"""A grpc.aio server interceptor that runs each call inside a server span named after its method,
parented under the caller's ``traceparent`` metadata: the gateway's and the manager's gRPC calls.
Health checks (``grpc.health.v1.Health``, which probes call every few seconds) are not traced."""

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from sluice.auth.grpc_interceptor import HEALTH_SERVICE, service_of
from sluice.tracing.otel import TRACEPARENT, TRACESTATE, Tracing

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def carrier_of(metadata: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in metadata or ():
        if key.lower() in (TRACEPARENT, TRACESTATE):
            found[key.lower()] = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return found


class TracingInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable["Handler | None"]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> "Handler | None":
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or service_of(method) == HEALTH_SERVICE:
            return handler
        carrier = carrier_of(handler_call_details.invocation_metadata)
        return _traced(handler, self._tracing, method.lstrip("/"), carrier)


def _traced(handler: Handler, tracing: Tracing, name: str, carrier: dict[str, str]) -> Handler:
    attributes = {"rpc.system": "grpc", "rpc.method": name}
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }

    def around(behavior: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(behavior):

            async def streamed(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                with tracing.server_span(name, carrier, attributes) as span:
                    async for item in behavior(request, context):
                        yield item
                    _status(tracing, span, context)

            return streamed

        async def answered(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            with tracing.server_span(name, carrier, attributes) as span:
                result = await behavior(request, context)
                _status(tracing, span, context)
                return result

        return answered

    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(around(handler.unary_unary), **options)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(around(handler.unary_stream), **options)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(around(handler.stream_unary), **options)
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(around(handler.stream_stream), **options)
    return handler


def _status(tracing: Tracing, span: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """A call that set an error code (without raising) is marked failed."""
    code = context.code()
    if code is not None and code != grpc.StatusCode.OK:
        tracing.mark_error(span, f"{code}: {context.details() or ''}")
