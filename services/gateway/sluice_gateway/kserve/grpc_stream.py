"""One ModelStreamInfer call (Triton's bidirectional stream): each inbound ModelInferRequest becomes one
job; its responses go out as ModelStreamInferResponse messages as they arrive (several requests may
interleave, correlated by id). Every response carries ``triton_final_response``; a request's last
response has it true. A failing request gets one in-stream ``error_message`` (``infer_response.id``
names it) and the call stays open. The call ends with OK once the client half-closed and every
request answered.

How requests, jobs and responses flow is :mod:`bidi_call`'s.
"""

from collections.abc import AsyncGenerator
from contextlib import aclosing

from sluice.errors import as_sluice_error

from sluice_gateway.grpc_api import RawContext
from sluice_gateway.grpc_api.bidi_call import BidiCall
from sluice_gateway.kserve.grpc_codec import parse_infer_request, stream_error
from sluice_gateway.kserve.grpc_wire import has_outputs, stream_response
from sluice_gateway.kserve.service import InferStream, KServeService


def send_final(stream: InferStream, payload: bytes) -> bool:
    """Whether a request's final reply goes out. A response without outputs marks only the end of a
    decoupled request; it is sent when the client asked for empty final responses."""
    return not stream.decoupled or stream.options.empty_final_response or has_outputs(payload)


class StreamInferCall(BidiCall[InferStream]):
    name = "kserve-stream"

    def __init__(self, service: KServeService, context: RawContext, *, max_in_flight: int) -> None:
        super().__init__(context, max_in_flight=max_in_flight)
        self._service = service

    async def open(self, raw: bytes) -> InferStream | bytes:
        request_id = ""
        try:
            request = parse_infer_request(raw)
            request_id = request.request_id
            return await self._service.open_stream(request, raw, self._context.time_remaining())
        except Exception as exc:
            return stream_error(as_sluice_error(exc).message, request_id)

    async def messages(self, stream: InferStream) -> AsyncGenerator[bytes, None]:
        async with aclosing(stream.replies()) as replies:
            async for reply in replies:
                if not reply.final:
                    yield stream_response(reply.payload, final=False)
                elif send_final(stream, reply.payload):
                    yield stream_response(reply.payload, final=True)

    def failure(self, stream: InferStream, error: Exception) -> bytes:
        return stream_error(as_sluice_error(error).message, stream.request.request_id)
