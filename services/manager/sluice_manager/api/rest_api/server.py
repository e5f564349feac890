"""The management port's aiohttp application, served on ``management_address`` by a
:class:`sluice.transport.http_listener.HttpListener`.

Middlewares, outermost first: the error middleware, then ``extra_middlewares`` (token authorization,
the model-API switch: their SluiceErrors map like any other), then the route. ``extra_routes`` adds
routes beside TorchServe's (``/token``).
"""

from collections.abc import Sequence
from typing import Any

from aiohttp import web
from sluice.transport.torchserve_http import on_response_prepare

from sluice_manager.api.management import ManagementService
from sluice_manager.api.rest_api.errors import management_error_middleware
from sluice_manager.api.rest_api.routes import ManagementRoutes


def create_app(
    service: ManagementService,
    *,
    max_request_size: int,
    extra_middlewares: Sequence[Any] = (),
    extra_routes: Sequence[web.RouteDef] = (),
) -> web.Application:
    app = web.Application(
        middlewares=[management_error_middleware, *extra_middlewares], client_max_size=max_request_size
    )
    app.on_response_prepare.append(on_response_prepare)
    app.add_routes([*ManagementRoutes(service).routes(), *extra_routes])
    return app
