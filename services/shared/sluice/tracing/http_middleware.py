"""An aiohttp middleware that runs each request inside a server span (``<METHOD> <route>``), parented
under the caller's ``traceparent`` header: the gateway's REST ports and the manager's."""

from collections.abc import Awaitable, Callable

from aiohttp import web

from sluice.tracing.otel import TRACEPARENT, TRACESTATE, Tracing

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def tracing_middleware(tracing: Tracing) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        carrier = {key: request.headers[key] for key in (TRACEPARENT, TRACESTATE) if key in request.headers}
        route = request.match_info.route.resource
        path = route.canonical if route is not None else request.path
        attributes = {"http.request.method": request.method, "http.route": path}
        with tracing.server_span(f"{request.method} {path}", carrier, attributes) as span:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                span.set_attribute("http.response.status_code", exc.status)
                raise
            span.set_attribute("http.response.status_code", response.status)
            if response.status >= 500:
                tracing.mark_error(span, f"HTTP {response.status}")
            return response

    return traced
