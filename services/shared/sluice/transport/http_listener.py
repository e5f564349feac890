"""TorchServe's listen addresses (``inference_address``, ``management_address``, ``metrics_address``)
and an aiohttp application served on one of them.

An address is ``http://host:port``, ``https://host:port`` (TLS with the service's certificate,
:mod:`sluice.transport.tls`) or ``unix:/path``; port 0 binds a free port (tests).
"""

import contextlib
import os
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

from sluice.transport.bad_request_log import BadRequestLog, LogBudget

# aiohttp reads a timeout of 0 as "no timeout": a zero grace still cancels at once with this.
_MIN_GRACE_S = 0.001
# Lines about unparsable requests, per listener (sluice.transport.bad_request_log).
BAD_REQUEST_LOG_LIMIT = 10
BAD_REQUEST_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str = ""
    port: int = 0
    unix_path: str = ""
    tls: bool = False

    def __str__(self) -> str:
        if self.unix_path:
            return f"unix:{self.unix_path}"
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


def parse_address(address: str) -> ListenAddress:
    """``http://127.0.0.1:8080`` or ``https://...`` -> host, port and TLS; ``unix:/tmp/s.sock`` -> a
    Unix socket path."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        if not path:
            raise ValueError(f"no socket path in {address!r}")
        return ListenAddress(unix_path=path)
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https"):
        raise ValueError(
            f"unsupported address {address!r}: use http://host:port, https://host:port or unix:/path"
        )
    if parts.hostname is None:
        raise ValueError(f"no host in {address!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {address!r}") from exc
    default_port = 443 if parts.scheme == "https" else 80
    return ListenAddress(
        host=parts.hostname, port=default_port if port is None else port, tls=parts.scheme == "https"
    )


class HttpListener:
    """One application served on one address.

    With ``cancel_on_disconnect`` a client that goes away cancels its handler (the inference port:
    the job is then flagged cancelled for the workers). Stopping closes the listener, lets in-flight
    requests finish for up to the grace period, then cancels what is left. Requests aiohttp cannot
    parse are logged as one line each under ``name``, at a bounded rate (``bad_requests``).
    """

    def __init__(
        self,
        app: web.Application,
        address: ListenAddress,
        *,
        name: str,
        cancel_on_disconnect: bool,
        bad_requests: LogBudget | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: what an ``https://`` address serves with (ValueError without one)."""
        if address.tls and ssl_context is None:
            raise ValueError(f"{name} address {address} is https: set certificate_file and private_key_file")
        budget = bad_requests or LogBudget(BAD_REQUEST_LOG_LIMIT, BAD_REQUEST_LOG_INTERVAL_S)
        self._bad_request_log = BadRequestLog(name, budget)
        self._runner = web.AppRunner(
            app, handler_cancellation=cancel_on_disconnect, access_log=None, logger=self._bad_request_log
        )
        self._address = address
        self._ssl_context = ssl_context if address.tls else None
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
            site = web.TCPSite(
                self._runner, address.host, address.port, reuse_address=True, ssl_context=self._ssl_context
            )
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
        self._bad_request_log.flush()
