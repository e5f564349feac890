"""One ModelStreamInfer call (Triton's bidirectional stream): each inbound ModelInferRequest becomes one
job; its responses go out as ModelStreamInferResponse messages as they arrive (several requests may
interleave, correlated by id). Every response carries ``triton_final_response``; a request's last
response has it true. A failing request gets one in-stream ``error_message`` (``infer_response.id``
names it) and the call stays open. The call ends with OK once the client half-closed and every
request answered.

Requests are admitted in arrival order by one pump task; at most ``max_in_flight`` await replies, so
further requests are not read until one finishes (HTTP/2 flow control pushes back).
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from sluice_gateway.grpc_api.errors import as_sluice_error
from sluice_gateway.grpc_api.kserve_codec import parse_infer_request, stream_error
from sluice_gateway.grpc_api.kserve_wire import has_outputs, stream_response
from sluice_gateway.v2_service import V2Service, V2Stream

OUTBOX_MESSAGES = 64


def send_final(stream: V2Stream, payload: bytes) -> bool:
    """Whether a request's final reply goes out. A response without outputs marks only the end of a
    decoupled request; it is sent when the client asked for empty final responses."""
    return not stream.decoupled or stream.options.empty_final_response or has_outputs(payload)


class StreamInferCall:
    def __init__(self, service: V2Service, context: Any, *, max_in_flight: int) -> None:
        self._service = service
        self._context = context
        self._slots = asyncio.Semaphore(max_in_flight)
        # None marks the end of the call.
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue(OUTBOX_MESSAGES)
        self._forwarders: dict[asyncio.Task[None], V2Stream] = {}
        self._failure: Exception | None = None

    async def run(self, requests: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        pump = asyncio.create_task(self._pump(requests), name="kserve-stream-pump")
        try:
            while (message := await self._outbox.get()) is not None:
                yield message
            if self._failure is not None:
                raise self._failure
        finally:
            pump.cancel()
            for task, stream in list(self._forwarders.items()):
                task.cancel()
                stream.close()  # a task cancelled before it ran never reaches its own finally

    async def _pump(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for raw in requests:
                await self._slots.acquire()
                await self._admit(raw)
            await asyncio.gather(*self._forwarders)
        except Exception as exc:  # surfaced by run() after the responses already queued
            self._failure = exc
        # Not in a finally: a cancelled pump has nobody left to tell.
        await self._outbox.put(None)

    async def _admit(self, raw: bytes) -> None:
        request_id = ""
        try:
            request = parse_infer_request(raw)
            request_id = request.request_id
            stream = await self._service.open_stream(request, raw, self._context.time_remaining())
        except Exception as exc:
            self._slots.release()
            await self._outbox.put(stream_error(as_sluice_error(exc).message, request_id))
            return
        task = asyncio.create_task(self._forward(stream), name="kserve-stream-job")
        self._forwarders[task] = stream
        task.add_done_callback(lambda done: self._forwarders.pop(done, None))

    async def _forward(self, stream: V2Stream) -> None:
        try:
            async for reply in stream.replies():
                if not reply.final:
                    await self._outbox.put(stream_response(reply.payload, final=False))
                elif send_final(stream, reply.payload):
                    await self._outbox.put(stream_response(reply.payload, final=True))
        except Exception as exc:
            await self._outbox.put(stream_error(as_sluice_error(exc).message, stream.request.request_id))
        finally:
            stream.close()
            self._slots.release()
