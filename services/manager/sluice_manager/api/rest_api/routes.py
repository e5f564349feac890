"""TorchServe's management routes (torchserve.md section 7.2). Each handler reads the request with
TorchServe's REST defaults (:mod:`.params`), awaits one :class:`ManagementService` call and writes
TorchServe's JSON: ``{"status": ...}`` with 200 (or 202 / 206), or the List/Describe JSON."""

import json
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web
from sluice.errors import ErrorCode, SluiceError
from sluice.registry import names
from sluice.transport.torchserve_http import json_response, status_response

from sluice_manager.api.management import ManagementService
from sluice_manager.api.rest_api import params
from sluice_manager.api.rest_api.openapi import api_description

MODELS = "/models"
MODEL = "/models/{model}"
VERSION = "/models/{model}/{version}"
SET_DEFAULT = "/models/{model}/{version}/set-default"
# Sluice's canary: PUT a JSON object {version: weight} ({} clears). Routed before /models/{m}/{v}: a PUT
# there sets weights, so a version named "set-weights" is scaled over gRPC only (aiohttp goes on to
# /models/{m}/{v} for the other methods: GET and DELETE still reach it).
SET_WEIGHTS = "/models/{model}/set-weights"
KSERVE_V1_MODEL = "/v1/models/{model}"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def with_slash(path: str, **handlers: Handler) -> list[web.RouteDef]:
    """``path`` and ``path/`` (TorchServe splits paths on "/", so a trailing slash changes nothing),
    one route per method."""
    return [
        web.route(method.upper(), variant, handler)
        for variant in (path, path + "/")
        for method, handler in handlers.items()
    ]


class ManagementRoutes:
    def __init__(self, service: ManagementService) -> None:
        self._service = service

    def routes(self) -> list[web.RouteDef]:
        return [
            web.options("/", self.api_description),
            web.route("*", "/api-description", self.api_description),
            *with_slash(MODELS, get=self.list_models, post=self.register),
            *self._model_routes(MODEL),
            *with_slash(SET_WEIGHTS, put=self.set_weights),
            *self._model_routes(VERSION),
            *with_slash(SET_DEFAULT, put=self.set_default),
            *with_slash(KSERVE_V1_MODEL, get=self.model_ready),
        ]

    def _model_routes(self, path: str) -> list[web.RouteDef]:
        return with_slash(
            path,
            get=self.describe,
            put=self.scale,
            delete=self.unregister,
            options=self.model_api_description,
        )

    async def api_description(self, request: web.Request) -> web.Response:
        return json_response(api_description())

    async def model_api_description(self, request: web.Request) -> web.Response:
        await self._service.describe(request.match_info["model"], request.match_info.get("version"))
        return json_response(api_description())

    async def list_models(self, request: web.Request) -> web.Response:
        query = request.query
        listing = await self._service.list_models(
            params.integer(query, "limit", 100), params.integer(query, "next_page_token", 0)
        )
        return json_response(listing)

    async def register(self, request: web.Request) -> web.Response:
        if request.content_type == "application/json":
            register = params.register_from_json(await request.read())
        else:
            register = params.register_from_query(request.query)
        status = await self._service.register(register)
        return status_response(status.message, status.http_status)

    async def describe(self, request: web.Request) -> web.Response:
        entries = await self._service.describe(
            request.match_info["model"],
            request.match_info.get("version"),
            customized=params.boolean(request.query, "customized", False),
            headers={key: value for key, value in request.headers.items() if key != hdrs.AUTHORIZATION},
            body=await request.read(),
        )
        return json_response(entries)

    async def scale(self, request: web.Request) -> web.Response:
        scale = params.scale_from_query(
            request.match_info["model"], request.match_info.get("version"), request.query
        )
        status = await self._service.scale(scale)
        return status_response(status.message, status.http_status)

    async def unregister(self, request: web.Request) -> web.Response:
        status = await self._service.unregister(
            request.match_info["model"], request.match_info.get("version")
        )
        return status_response(status.message, status.http_status)

    async def set_default(self, request: web.Request) -> web.Response:
        model = names.check_model_name(request.match_info["model"])
        status = await self._service.set_default(model, request.match_info["version"])
        return status_response(status.message, status.http_status)

    async def set_weights(self, request: web.Request) -> web.Response:
        model = names.check_model_name(request.match_info["model"])
        try:
            weights = json.loads(await request.read() or b"{}")
        except ValueError:
            weights = None
        if not isinstance(weights, dict):
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT,
                "Invalid traffic weights: the body must be a JSON object of version: weight, "
                'e.g. {"1.0": 90, "2.0": 10}',
            )
        status = await self._service.set_weights(model, weights)
        return status_response(status.message, status.http_status)

    async def model_ready(self, request: web.Request) -> web.Response:
        model = request.match_info["model"].split(":", 1)[0]
        return json_response(await self._service.model_ready(model))
