"""KServe v2 REST (the Open Inference Protocol's HTTP form, with Triton's binary tensor data extension)
on the transport-agnostic :class:`~sluice_gateway.kserve.service.KServeService` the gRPC servicer uses.
Errors answer ``{"error": "<message>"}`` (see :mod:`.errors`)."""

from aiohttp import web

from sluice_gateway.kserve.grpc_codec import model_config, statistics, to_kserve_request
from sluice_gateway.kserve.rest_codec import (
    HEADER_LENGTH,
    infer_response_body,
    message_json,
    parse_infer_request,
    region_body,
)
from sluice_gateway.kserve.service import KServeService


def _model(request: web.Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


class KServeRoutes:
    def __init__(self, service: KServeService) -> None:
        self._service = service

    def routes(self) -> list[web.RouteDef]:
        routes = [
            web.get("/v2", self.server_metadata),
            web.get("/v2/health/live", self.live),
            web.get("/v2/health/ready", self.ready),
            web.get("/v2/models/stats", self.all_statistics),
            web.get("/v2/systemsharedmemory/status", self.shared_memory_status),
            web.get("/v2/systemsharedmemory/region/{name}/status", self.shared_memory_status),
            web.post("/v2/systemsharedmemory/region/{name}/register", self.shared_memory_register),
            web.post("/v2/systemsharedmemory/unregister", self.shared_memory_unregister),
            web.post("/v2/systemsharedmemory/region/{name}/unregister", self.shared_memory_unregister),
        ]
        for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            routes += [
                web.get(base, self.model_metadata),
                web.get(f"{base}/ready", self.model_ready),
                web.get(f"{base}/config", self.model_config),
                web.get(f"{base}/stats", self.statistics),
                web.post(f"{base}/infer", self.infer),
            ]
        return routes

    async def server_metadata(self, request: web.Request) -> web.Response:
        info = self._service.server_metadata()
        return web.json_response(
            {"name": info.name, "version": info.version, "extensions": list(info.extensions)}
        )

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response({"live": self._service.live()})

    async def ready(self, request: web.Request) -> web.Response:
        ready = await self._service.ready()
        # The protocol: 200 means true, a 4xx means false.
        return web.json_response({"ready": ready}, status=200 if ready else 400)

    async def model_ready(self, request: web.Request) -> web.Response:
        model, version = _model(request)
        ready = await self._service.model_ready(model, version)
        return web.json_response({"name": model, "ready": ready}, status=200 if ready else 400)

    async def model_metadata(self, request: web.Request) -> web.Response:
        info = await self._service.model_metadata(*_model(request))
        return web.json_response(
            {
                "name": info.name,
                "versions": list(info.versions),
                "platform": info.platform,
                "inputs": [
                    {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in info.inputs
                ],
                "outputs": [
                    {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in info.outputs
                ],
            }
        )

    async def model_config(self, request: web.Request) -> web.Response:
        view = await self._service.model_config(*_model(request))
        return web.json_response(message_json(model_config(view).config))

    async def statistics(self, request: web.Request) -> web.Response:
        entries = await self._service.statistics(*_model(request))
        return web.json_response(message_json(statistics(entries)))

    async def all_statistics(self, request: web.Request) -> web.Response:
        return web.json_response(message_json(statistics(await self._service.statistics("", ""))))

    async def shared_memory_status(self, request: web.Request) -> web.Response:
        regions = await self._service.shared_memory.status(request.match_info.get("name", ""))
        return web.json_response(
            [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in regions]
        )

    async def shared_memory_register(self, request: web.Request) -> web.Response:
        key, offset, byte_size = region_body(await request.read())
        await self._service.shared_memory.register(request.match_info["name"], key, offset, byte_size)
        return web.Response()

    async def shared_memory_unregister(self, request: web.Request) -> web.Response:
        await self._service.shared_memory.unregister(request.match_info.get("name", ""))
        return web.Response()

    async def infer(self, request: web.Request) -> web.Response:
        model, version = _model(request)
        parsed = parse_infer_request(await request.read(), request.headers.get(HEADER_LENGTH), model, version)
        raw = parsed.message.SerializeToString()
        body, header_length = infer_response_body(
            await self._service.infer(to_kserve_request(parsed.message), raw, None), parsed
        )
        if header_length is None:
            return web.Response(body=body, content_type="application/json")
        return web.Response(
            body=body,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_length)},
        )
