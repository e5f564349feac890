"""The management port: an aiohttp application on ``management_address`` (``http://host:port`` or
``unix:/path``; port 0 binds a free port).

Middlewares, outermost first: the error middleware, then ``extra_middlewares`` (token authorization,
the model-API switch: their SluiceErrors map like any other), then the route. ``extra_routes`` adds
routes beside TorchServe's (``POST /token``). Stopping closes the listener and lets in-flight
requests finish for up to the grace period.
"""

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from sluice_manager.management import ManagementService
from sluice_manager.rest_api.errors import error_middleware
from sluice_manager.rest_api.http import on_response_prepare
from sluice_manager.rest_api.routes import ManagementRoutes

_MIN_GRACE_S = 0.001


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str = ""
    port: int = 0
    unix_path: str = ""


def parse_address(address: str) -> ListenAddress:
    """``http://127.0.0.1:8081`` or ``unix:/path`` (HTTPS is terminated in front of Sluice)."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        if not path:
            raise ValueError(f"no socket path in {address!r}")
        return ListenAddress(unix_path=path)
    parts = urlsplit(address)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"unsupported address {address!r}: use http://host:port or unix:/path")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {address!r}") from exc
    return ListenAddress(host=parts.hostname, port=80 if port is None else port)


def create_app(
    service: ManagementService,
    *,
    max_request_size: int,
    extra_middlewares: Sequence[Any] = (),
    extra_routes: Sequence[web.RouteDef] = (),
) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware, *extra_middlewares], client_max_size=max_request_size
    )
    app.on_response_prepare.append(on_response_prepare)
    app.add_routes([*ManagementRoutes(service).routes(), *extra_routes])
    return app


class ManagementHttpServer:
    def __init__(self, app: web.Application, address: ListenAddress) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self._address = address
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the bound TCP port (0 for a Unix socket)."""
        await self._runner.setup()
        address = self._address
        site: web.BaseSite
        if address.unix_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address.unix_path)
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
