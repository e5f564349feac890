"""TorchServe's HTTP response conventions (``NettyUtils.sendHttpResponse`` / ``sendError``), shared
by the inference and management ports: ``x-request-id``, no-cache headers on every response, pretty
JSON bodies ending in a newline, ``{"code", "type", "message"}`` error bodies, ``Connection: close``
after an error, and a Content-Type only when there is one to send."""

import uuid
from typing import Any

from aiohttp import hdrs, web

from sluice.errors import SluiceError
from sluice.transport.json_text import pretty_json
from sluice.transport.status_map import rest_error_type, rest_status

REQUEST_ID_HEADER = "x-request-id"
CACHE_HEADERS = {
    "Pragma": "no-cache",
    "Cache-Control": "no-cache; no-store, must-revalidate, private",
    "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
}
NOT_FOUND_MESSAGE = "Requested resource is not found, please refer to API document."
METHOD_NOT_ALLOWED_MESSAGE = "Requested method is not allowed, please refer to API document."
# Request storage: the id a response reports (the job id once a job exists).
REQUEST_ID = web.RequestKey("sluice.request_id", str)
# Response storage: aiohttp adds "application/octet-stream" to bodies without a type; TorchServe
# sends no Content-Type unless the handler set one, so such responses drop it before sending.
NO_CONTENT_TYPE = web.ResponseKey("sluice.no_content_type", bool)


def request_id(request: web.Request) -> str:
    """The id of this request: the job id once one was created, else a fresh one."""
    rid = request.get(REQUEST_ID)
    if rid is None:
        rid = uuid.uuid4().hex
        request[REQUEST_ID] = rid
    return rid


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=pretty_json(value), status=status, content_type="application/json")


def status_response(message: str, status: int = 200) -> web.Response:
    return json_response({"status": message}, status)


def error_response(error: SluiceError) -> web.Response:
    status = rest_status(error)
    return error_body_response(status, rest_error_type(error), error.message)


def error_body_response(status: int, error_type: str, message: str) -> web.Response:
    response = json_response({"code": status, "type": error_type, "message": message}, status)
    response.force_close()
    return response


def routing_error(exc: web.HTTPException) -> web.StreamResponse:
    """aiohttp's routing and request errors (404, 405, a bad request) with TorchServe's bodies."""
    if exc.status == 404:
        return error_body_response(404, "ResourceNotFoundException", NOT_FOUND_MESSAGE)
    if exc.status == 405:
        return error_body_response(405, "MethodNotAllowedException", METHOD_NOT_ALLOWED_MESSAGE)
    if exc.status >= 400:
        return error_body_response(exc.status, "BadRequestException", exc.text or exc.reason)
    return exc


def empty_error(status: int) -> web.Response:
    """An error without a body (TorchServe's 413 for an oversized request)."""
    response = web.Response(status=status)
    response.force_close()
    return response


async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp signal, run for every response just before its headers go out (after aiohttp's own
    defaults): TorchServe's headers."""
    response.headers[REQUEST_ID_HEADER] = request_id(request)
    response.headers.update(CACHE_HEADERS)
    if response.status >= 400:
        response.headers[hdrs.CONNECTION] = "close"
    if response.get(NO_CONTENT_TYPE):
        response.headers.popall(hdrs.CONTENT_TYPE, None)
