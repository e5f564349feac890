"""TorchServe's HTTP conventions on the management port (``NettyUtils``): pretty JSON bodies ending in
a newline, ``{"code", "type", "message"}`` errors, ``x-request-id`` and no-cache headers on every
response, ``Connection: close`` after an error."""

import json
import uuid
from typing import Any

from aiohttp import hdrs, web
from sluice.errors import SluiceError
from sluice.status_map import rest_error_type, rest_status

REQUEST_ID_HEADER = "x-request-id"
CACHE_HEADERS = {
    "Pragma": "no-cache",
    "Cache-Control": "no-cache; no-store, must-revalidate, private",
    "Expires": "Thu, 01 Jan 1970 00:00:00 UTC",
}
REQUEST_ID = web.RequestKey("sluice.manager.request_id", str)


def request_id(request: web.Request) -> str:
    rid = request.get(REQUEST_ID)
    if rid is None:
        rid = uuid.uuid4().hex
        request[REQUEST_ID] = rid
    return rid


def pretty_json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=pretty_json(value), status=status, content_type="application/json")


def status_response(message: str, status: int = 200) -> web.Response:
    return json_response({"status": message}, status)


def error_response(error: SluiceError) -> web.Response:
    return error_body_response(rest_status(error), rest_error_type(error), error.message)


def error_body_response(status: int, error_type: str, message: str) -> web.Response:
    response = json_response({"code": status, "type": error_type, "message": message}, status)
    response.force_close()
    return response


async def on_response_prepare(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[REQUEST_ID_HEADER] = request_id(request)
    response.headers.update(CACHE_HEADERS)
    if response.status >= 400:
        response.headers[hdrs.CONNECTION] = "close"
