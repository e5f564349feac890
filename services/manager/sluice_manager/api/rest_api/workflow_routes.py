"""TorchServe's workflow management routes on the management port: ``POST /workflows`` (query string, or a
JSON body with the same keys), ``GET /workflows`` (paged), ``GET /workflows/{name}`` and
``DELETE /workflows/{name}``. Other methods are TorchServe's 405."""

import json
from typing import Any

from aiohttp import web
from sluice.errors import ErrorCode, SluiceError
from sluice.transport.torchserve_http import json_response, status_response

from sluice_manager.api.rest_api import params
from sluice_manager.api.rest_api.routes import with_slash
from sluice_manager.api.workflows import RegisterWorkflowRequest, WorkflowService

WORKFLOWS = "/workflows"
WORKFLOW = "/workflows/{name}"
DEFAULT_TIMEOUT_S = 120


class WorkflowRoutes:
    def __init__(self, service: WorkflowService) -> None:
        self._service = service

    def routes(self) -> list[web.RouteDef]:
        return [
            *with_slash(WORKFLOWS, get=self.list, post=self.register),
            *with_slash(WORKFLOW, get=self.describe, delete=self.unregister),
        ]

    async def list(self, request: web.Request) -> web.Response:
        query = request.query
        listing = await self._service.listing(
            params.integer(query, "limit", 100), params.integer(query, "next_page_token", 0)
        )
        return json_response(listing)

    async def register(self, request: web.Request) -> web.Response:
        if request.content_type == "application/json":
            register = _from_json(await request.read())
        else:
            query = request.query
            register = RegisterWorkflowRequest(
                url=params.text(query, "url") or "",
                workflow_name=params.text(query, "workflow_name"),
                response_timeout_s=params.integer(query, "response_timeout", DEFAULT_TIMEOUT_S),
                startup_timeout_s=params.integer(query, "startup_timeout", DEFAULT_TIMEOUT_S),
            )
        return status_response(await self._service.register(register))

    async def describe(self, request: web.Request) -> web.Response:
        return json_response(await self._service.describe(request.match_info["name"]))

    async def unregister(self, request: web.Request) -> web.Response:
        return status_response(await self._service.unregister(request.match_info["name"]))


def _from_json(body: bytes) -> RegisterWorkflowRequest:
    try:
        loaded: Any = json.loads(body or b"{}")
    except ValueError:
        loaded = None
    if not isinstance(loaded, dict):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid request body: a JSON object was expected")
    url, name = loaded.get("url"), loaded.get("workflow_name")
    return RegisterWorkflowRequest(
        url=url if isinstance(url, str) else "",
        workflow_name=name if isinstance(name, str) and name else None,
        response_timeout_s=_json_int(loaded, "response_timeout"),
        startup_timeout_s=_json_int(loaded, "startup_timeout"),
    )


def _json_int(loaded: dict[str, Any], key: str) -> int:
    value = loaded.get(key, DEFAULT_TIMEOUT_S)
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_TIMEOUT_S
