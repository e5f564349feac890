"""The gateway's aiohttp applications: the inference port and the metrics port.

Middlewares, outermost first: the error middleware, then ``extra_middlewares`` (where token auth
goes: its SluiceErrors map like any other), then the route. Each is served by a
:class:`sluice.transport.http_listener.HttpListener` that cancels a handler whose client disconnects.
"""

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiohttp import web
from sluice.transport.torchserve_http import on_response_prepare

from sluice_gateway.rest_api.errors import gateway_error_middleware

ResponseHook = Callable[[web.Request, web.StreamResponse], Awaitable[None]]


def create_app(
    routes: Iterable[web.RouteDef],
    *,
    max_request_size: int,
    extra_middlewares: Sequence[Any] = (),
    on_prepare: Sequence[ResponseHook] = (),
) -> web.Application:
    """``on_prepare``: more hooks called as each response is sent (the response counters)."""
    app = web.Application(
        middlewares=[gateway_error_middleware, *extra_middlewares], client_max_size=max_request_size
    )
    app.on_response_prepare.append(on_response_prepare)
    app.on_response_prepare.extend(on_prepare)
    app.add_routes(list(routes))
    return app
