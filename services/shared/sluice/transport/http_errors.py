"""Errors to HTTP, in one aiohttp middleware per application (the outermost, so that the errors of
the token and model-API middlewares map here too), for the gateway's and the manager's REST ports.

Domain errors map through :mod:`sluice.transport.status_map`; aiohttp's routing and request errors (404, 405,
413, a bad request) get the API's own texts; anything else is a bug: a generic 500, the traceback and
request id in the log (:func:`sluice.errors.as_sluice_error`). What differs between APIs is the body,
an :class:`ErrorBodies`: TorchServe's ``{"code", "type", "message"}`` (:class:`TorchServeBodies`), or
KServe v2's ``{"error": ...}`` on the gateway's ``/v2`` paths.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sluice.errors import SluiceError, Unavailable, as_sluice_error
from sluice.transport import torchserve_http

# Log context a request binds (the gateway binds it when it creates the job); it ends with the request.
REQUEST_CONTEXT = ("request_id", "model", "version")


class StreamBroken(Exception):
    """A failure after a streamed response started: the connection is dropped (no status to send)."""


class ErrorBodies(Protocol):
    def domain(self, request: web.Request, error: SluiceError) -> web.StreamResponse:
        """The answer to a domain error."""

    def routing(self, request: web.Request, exc: web.HTTPException) -> web.StreamResponse:
        """The answer to aiohttp's own errors (no route, method not allowed, body too large, ...)."""


@dataclass(frozen=True, slots=True)
class TorchServeBodies:
    """TorchServe's error bodies; ``too_large`` answers a body over the size limit (TorchServe's
    inference port sends an empty 413, its management port a body)."""

    too_large: Callable[[], web.StreamResponse]

    def domain(self, request: web.Request, error: SluiceError) -> web.StreamResponse:
        return torchserve_http.error_response(error)

    def routing(self, request: web.Request, exc: web.HTTPException) -> web.StreamResponse:
        return self.too_large() if exc.status == 413 else torchserve_http.routing_error(exc)


def error_middleware(bodies: ErrorBodies, unavailable: Unavailable | None = None) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            return bodies.routing(request, exc)
        except SluiceError as error:
            return bodies.domain(request, error)
        except StreamBroken:
            raise
        except Exception as exc:
            rid = torchserve_http.request_id(request)
            return bodies.domain(
                request, as_sluice_error(exc, unavailable, request_id=rid, path=request.path)
            )
        finally:
            structlog.contextvars.unbind_contextvars(*REQUEST_CONTEXT)

    return middleware
