"""TorchServe's workflow inference API on the inference port: ``POST /wfpredict/{workflow}`` (any method,
as TorchServe routes it). The request reaches the root node exactly as a ``/predictions`` request
reaches a handler (body, form fields or multipart parts, with the HTTP headers); the answer is the
single leaf's output with ``Content-Type: application/json``, or the leaves' JSON object
(:mod:`.answers`). A single leaf that answers in chunks (``send_intermediate_predict_response``)
streams them as a chunked response, as a model's ``/predictions`` does."""

from contextlib import aclosing

from aiohttp import hdrs, web
from sluice.envelope import WireProtocol
from sluice.errors import SluiceError
from sluice.log import get_logger
from sluice.transport.http_errors import StreamBroken

from sluice_gateway.torchserve.rest_codec import request_headers
from sluice_gateway.workflows.executor import NodeRequest, WorkflowCall
from sluice_gateway.workflows.service import Workflows

log = get_logger(__name__)

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
            await response.prepare(request)
            await response.write(first.payload)
            try:
                async for reply in replies:
                    await response.write(reply.payload)
            except SluiceError as error:
                log.warning(
                    "workflow stream failed after it started", error=error.message, code=error.code.value
                )
                raise StreamBroken(error.message) from error
            await response.write_eof()
            return response


def _whole(body: bytes) -> web.Response:
    response = web.Response(body=body, status=200)
    response.headers[hdrs.CONTENT_TYPE] = JSON
    return response
