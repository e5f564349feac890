"""Triton's generate extension on the REST inference port, over the same
:class:`~sluice_gateway.kserve.service.KServeService` as ``/infer`` (statistics, validation, sequence
parameters, status mapping and token authorization alike):

- ``POST /v2/models/{model}[/versions/{version}]/generate``: one JSON object (``application/json``),
  from the job's final reply. The job is ``final_only``: a generative model's worker joins its chunks
  into that reply. A decoupled model's final reply without outputs (it answered in chunks, or not at
  all) fails with Triton's text (500): such a model needs ``generate_stream``.
- ``POST .../generate_stream``: server-sent events (``text/event-stream; charset=utf-8``), one per
  reply, as they come. A failure before the first event is an HTTP error; after it, an error event
  ends the stream (the status, 200, was sent with the first event).

Requests and responses convert in :mod:`.generate_request` and :mod:`.generate_response`; errors
before a response starts are ``{"error": "<message>"}`` with the status ``/infer`` would answer.
"""

from contextlib import aclosing

from aiohttp import web
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger
from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.generate_request import parse_generate_body, to_infer_request
from sluice_gateway.kserve.generate_response import EVENT_STREAM, generate_document, json_body, sse_event
from sluice_gateway.kserve.grpc_codec import to_kserve_request
from sluice_gateway.kserve.grpc_wire import has_outputs
from sluice_gateway.kserve.service import KServeService

log = get_logger(__name__)

ONE_RESPONSE_MESSAGE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


class GenerateRoutes:
    def __init__(self, service: KServeService) -> None:
        self._service = service

    def routes(self) -> list[web.RouteDef]:
        routes = []
        for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            routes += [
                web.post(f"{base}/generate", self.generate),
                web.post(f"{base}/generate_stream", self.generate_stream),
            ]
        return routes

    async def generate(self, request: web.Request) -> web.Response:
        decoupled, message = await self._infer_request(request)
        raw = await self._service.infer(
            to_kserve_request(message), message.SerializeToString(), None, decoupled_refusal=None
        )
        if decoupled and not has_outputs(raw):
            raise SluiceError(ErrorCode.INTERNAL, ONE_RESPONSE_MESSAGE)
        return web.Response(body=json_body(generate_document(raw)), content_type="application/json")

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        _decoupled, message = await self._infer_request(request)
        stream = await self._service.open_stream(
            to_kserve_request(message), message.SerializeToString(), None
        )
        async with aclosing(stream.replies()) as replies:
            # A failure up to the first reply (included) is answered with a status by the middleware.
            first = sse_event(generate_document((await anext(replies)).payload))
            response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM})
            await response.prepare(request)
            await response.write(first)
            try:
                async for reply in replies:
                    # A reply without outputs only marks the end of a decoupled model's answer.
                    if not reply.final or has_outputs(reply.payload):
                        await response.write(sse_event(generate_document(reply.payload)))
            except SluiceError as error:  # told in-stream: the status went with the first event
                log.warning("generate stream failed after it started", error=error.message)
                await response.write(sse_event({"error": error.message}))
        await response.write_eof()
        return response

    async def _infer_request(self, request: web.Request) -> tuple[bool, pb.ModelInferRequest]:
        """Whether the version is decoupled, and the ModelInferRequest for a generate call (by the
        inputs the version declares)."""
        model, version = request.match_info["model"], request.match_info.get("version", "")
        record = await self._service.record(model, version)
        document = parse_generate_body(await request.read())
        return record.tensors.decoupled, to_infer_request(document, model, version, record.tensors)
