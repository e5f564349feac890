"""aiohttp applications and their listeners: the inference port and the metrics port.

Middlewares, outermost first: the error middleware, then ``extra_middlewares`` (where token auth
goes: its SluiceErrors map like any other), then the route. Client disconnects cancel the handler
(the job is flagged cancelled for the workers). Stopping closes the listener, lets in-flight requests
finish for up to the grace period, then cancels what is left.
"""

import contextlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

from aiohttp import web

from sluice_gateway.rest_api.addresses import ListenAddress
from sluice_gateway.rest_api.errors import error_middleware
from sluice_gateway.rest_api.torchserve_http import on_response_prepare

# aiohttp reads a timeout of 0 as "no timeout": a zero grace still cancels at once with this.
_MIN_GRACE_S = 0.001


def create_app(
    routes: Iterable[web.RouteDef],
    *,
    max_request_size: int,
    extra_middlewares: Sequence[Any] = (),
) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware, *extra_middlewares], client_max_size=max_request_size
    )
    app.on_response_prepare.append(on_response_prepare)
    app.add_routes(list(routes))
    return app


class HttpListener:
    """One application served on one address."""

    def __init__(self, app: web.Application, address: ListenAddress) -> None:
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        self._address = address
        self.port = 0

    @property
    def app(self) -> web.Application:
        return self._runner.app

    async def start(self) -> int:
        """Bind and serve; returns the bound TCP port (0 for a Unix socket)."""
        await self._runner.setup()
        address = self._address
        site: web.BaseSite
        if address.unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address.unix_path)  # a stale socket from an earlier run
            site = web.UnixSite(self._runner, address.unix_path)
        else:
            site = web.TCPSite(self._runner, address.host, address.port, reuse_address=True)
        await site.start()
        if not address.unix_path:
            self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self, grace_s: float) -> None:
        for site in list(self._runner.sites):
            await site.stop()
        server = self._runner.server
        if server is not None:
            server.pre_shutdown()
            await server.shutdown(max(grace_s, _MIN_GRACE_S))
        await self._runner.cleanup()
