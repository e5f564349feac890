"""TorchServe's workflow inference API on the inference port: ``POST /wfpredict/{workflow}`` (any method,
as TorchServe routes it). The request reaches the root node exactly as a ``/predictions`` request
reaches a handler (body, form fields or multipart parts, with the HTTP headers); the answer is the
single leaf's output with ``Content-Type: application/json``, or the leaves' JSON object
(:mod:`.answers`). A single leaf that answers in chunks (``send_intermediate_predict_response``)
streams them as a chunked response, as a model's ``/predictions`` does."""

from contextlib import aclosing

from aiohttp import hdrs, web
from sluice.envelope import WireProtocol

from sluice_gateway.rest_api.streaming import relay
from sluice_gateway.torchserve.rest_codec import request_headers
from sluice_gateway.workflows.executor import NodeRequest, WorkflowCall
from sluice_gateway.workflows.service import Workflows

JSON = "application/json"


class WorkflowRoutes:
    def __init__(self, workflows: Workflows) -> None:
        self._workflows = workflows

    def routes(self) -> list[web.RouteDef]:
        return [web.route("*", "/wfpredict/{name}", self.predict)]

    async def predict(self, request: web.Request) -> web.StreamResponse:
        workflow = await self._workflows.find(request.match_info["name"])
        call = WorkflowCall(
            workflow=workflow,
            root=NodeRequest(WireProtocol.TORCHSERVE_REST, await request.read()),
            headers=request_headers(request),
        )
        if len(workflow.leaves) > 1:
            return _whole(await self._workflows.answer(call))
        async with aclosing(self._workflows.stream(call)) as replies:
            first = await anext(replies)
            if first.final:
                return _whole(first.payload)
            response = web.StreamResponse(status=200)
            response.content_type = JSON
            response.enable_chunked_encoding()
            return await relay(request, response, first, replies)


def _whole(body: bytes) -> web.Response:
    response = web.Response(body=body, status=200)
    response.headers[hdrs.CONTENT_TYPE] = JSON
    return response
