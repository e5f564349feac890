"""The gateway's REST error bodies, for :func:`sluice.transport.http_errors.error_middleware`: KServe v2 paths
(``/v2...``) answer ``{"error": "<message>"}`` as the v2 REST protocol specifies; every other path
answers TorchServe's ``{"code", "type", "message"}`` (an oversized request: TorchServe's empty 413).
"""

from aiohttp import web
from sluice.errors import SluiceError
from sluice.transport.http_errors import TorchServeBodies, error_middleware
from sluice.transport.status_map import rest_status
from sluice.transport.torchserve_http import METHOD_NOT_ALLOWED_MESSAGE, NOT_FOUND_MESSAGE, empty_error

TOO_LARGE_MESSAGE = "Request body exceeds max_request_size."

_TORCHSERVE = TorchServeBodies(too_large=lambda: empty_error(413))
_KSERVE_ROUTING = {404: NOT_FOUND_MESSAGE, 405: METHOD_NOT_ALLOWED_MESSAGE, 413: TOO_LARGE_MESSAGE}


def is_kserve_path(request: web.Request) -> bool:
    return request.path == "/v2" or request.path.startswith("/v2/")


def kserve_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class GatewayErrorBodies:
    def domain(self, request: web.Request, error: SluiceError) -> web.StreamResponse:
        if is_kserve_path(request):
            return kserve_error(rest_status(error), error.message)
        return _TORCHSERVE.domain(request, error)

    def routing(self, request: web.Request, exc: web.HTTPException) -> web.StreamResponse:
        if not is_kserve_path(request):
            return _TORCHSERVE.routing(request, exc)
        if exc.status < 400:
            return exc
        return kserve_error(exc.status, _KSERVE_ROUTING.get(exc.status) or exc.text or exc.reason)


gateway_error_middleware = error_middleware(GatewayErrorBodies())
