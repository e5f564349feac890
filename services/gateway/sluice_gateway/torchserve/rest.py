"""TorchServe's inference API over REST (``inference_address``), on the shared data plane.

Every prediction becomes one batchable job whose replies are all read: one final reply is sent as a
whole response; intermediate replies (``send_intermediate_predict_response``) turn the response into
``Transfer-Encoding: chunked`` with the handler's headers (``ts_stream_next: true``). As in
TorchServe, the HTTP method of prediction routes is not checked; OPTIONS describes the model.

A stateful model's answer names its sequence in a response header named like the request's
(``ts_request_sequence_id``), whether the client named the sequence or the gateway started it: the
client needs it for the sequence's next request (TorchServe sends it only if the handler sets it).
"""

from contextlib import aclosing

from aiohttp import web
from sluice.registry import names
from sluice.transport.torchserve_http import REQUEST_ID, json_response

from sluice_gateway.dataplane import DataPlane
from sluice_gateway.health import ModelHealth
from sluice_gateway.inflight import StreamJob
from sluice_gateway.registry_cache import VersionResolver
from sluice_gateway.rest_api.streaming import relay
from sluice_gateway.sequences import SequenceHeaders
from sluice_gateway.torchserve.openapi import api_description
from sluice_gateway.torchserve.rest_codec import full_response, stream_response, to_call


class TorchServeRoutes:
    def __init__(
        self,
        plane: DataPlane,
        resolver: VersionResolver,
        model_health: ModelHealth,
        sequence_headers: SequenceHeaders,
    ) -> None:
        self._plane = plane
        self._resolver = resolver
        self._model_health = model_health
        self._sequence_headers = sequence_headers

    def routes(self) -> list[web.RouteDef]:
        routes = [
            web.route("*", "/ping", self.ping),
            web.route("*", "/api-description", self.api_description),
            web.options("/", self.api_description),
            web.route("*", "/v1/models/{model}:predict", self.kserve_v1_predict),
            web.route("*", "/v1/models/{model}:explain", self.kserve_v1_explain),
        ]
        for verb, handler in (("predictions", self.predictions), ("explanations", self.explanations)):
            routes += [
                web.route("*", f"/{verb}/{{model}}", handler),
                web.route("*", f"/{verb}/{{model}}/{{version}}", handler),
                web.route("*", f"/{verb}/{{model}}/{{version}}/{{url_path:.+}}", handler),
            ]
        return routes

    async def ping(self, request: web.Request) -> web.Response:
        healthy = await self._model_health.healthy()
        return json_response({"status": "Healthy" if healthy else "Unhealthy"}, 200 if healthy else 500)

    async def api_description(self, request: web.Request) -> web.Response:
        return json_response(api_description())

    async def predictions(self, request: web.Request) -> web.StreamResponse:
        return await self._predict(request, explain=False)

    async def explanations(self, request: web.Request) -> web.StreamResponse:
        return await self._predict(request, explain=True)

    async def kserve_v1_predict(self, request: web.Request) -> web.StreamResponse:
        return await self._run(request, request.match_info["model"], "", explain=False, url_path=None)

    async def kserve_v1_explain(self, request: web.Request) -> web.StreamResponse:
        return await self._run(request, request.match_info["model"], "", explain=True, url_path=None)

    async def _predict(self, request: web.Request, *, explain: bool) -> web.StreamResponse:
        model = request.match_info["model"]
        version = request.match_info.get("version", "")
        if request.method == "OPTIONS":
            await self._resolver.resolve(names.check_model_name(model), version)
            return json_response(api_description(model))
        url_path = request.match_info.get("url_path", "")
        return await self._run(request, model, version, explain=explain, url_path=url_path)

    async def _run(
        self, request: web.Request, model: str, version: str, *, explain: bool, url_path: str | None
    ) -> web.StreamResponse:
        body = await request.read()
        call = to_call(
            request,
            body,
            model=model,
            version=version,
            explain=explain,
            url_path=url_path,
            names=self._sequence_headers,
        )
        job = await self._plane.submit_stream(call)
        request[REQUEST_ID] = job.job_id
        try:
            return await _answer(request, job, self._sequence_headers.id)
        finally:
            job.close()


async def _answer(request: web.Request, job: StreamJob, sequence_header: str) -> web.StreamResponse:
    async with aclosing(job.replies()) as replies:
        first = await anext(replies)
        if first.final:
            return _name_sequence(full_response(first), job, sequence_header)
        return await relay(
            request, _name_sequence(stream_response(first), job, sequence_header), first, replies
        )


def _name_sequence(response: web.StreamResponse, job: StreamJob, header: str) -> web.StreamResponse:
    """Name a stateful model's sequence in the response, unless the handler already did."""
    if job.sequence_id:
        response.headers.setdefault(header, job.sequence_id)
    return response
