"""One StreamPredictions2 call: each inbound request becomes one streaming job; responses go out as
they arrive (several jobs may interleave); errors go out in-stream and the call stays open. The call
ends once the client half-closed and every job answered.

Requests are admitted in arrival order by one pump task (a sequence's jobs enter the queue in the
client's order); each admitted job gets a forwarding task. At most ``max_in_flight`` jobs await
replies; further requests are not read until one finishes, so HTTP/2 flow control pushes back.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from sluice.errors import ErrorCode, SluiceError

from sluice_gateway.dataplane import DataPlane
from sluice_gateway.grpc_api.errors import as_sluice_error
from sluice_gateway.grpc_api.torchserve_codec import (
    SEQUENCE_ID_REQUIRED,
    error_response,
    parse_request,
    sequence_headers,
    sequence_suffix,
    to_call,
)
from sluice_gateway.pending_jobs import StreamJob

# TorchServe answers a missing sequence id with code INTERNAL (its BadRequestException, sent in-stream).
MISSING_SEQUENCE_ID_CODE = grpc.StatusCode.INTERNAL
OUTBOX_MESSAGES = 64


class Stream2Call:
    def __init__(self, plane: DataPlane, context: Any, *, max_in_flight: int) -> None:
        self._plane = plane
        self._context = context
        self._slots = asyncio.Semaphore(max_in_flight)
        # None marks the end of the call.
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue(OUTBOX_MESSAGES)
        self._forwarders: dict[asyncio.Task[None], StreamJob] = {}
        self._failure: Exception | None = None

    async def run(self, requests: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
        pump = asyncio.create_task(self._pump(requests), name="stream2-pump")
        try:
            while (message := await self._outbox.get()) is not None:
                yield message
            if self._failure is not None:
                raise self._failure
        finally:
            pump.cancel()
            for task, job in list(self._forwarders.items()):
                task.cancel()
                job.close()  # a task cancelled before it ran never reaches its own finally

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
        sequence_id = ""
        try:
            request = parse_request(raw)
            sequence_id = request.sequence_id
            if not sequence_id:
                error = SluiceError(ErrorCode.INVALID_ARGUMENT, SEQUENCE_ID_REQUIRED)
                self._slots.release()
                await self._outbox.put(error_response(error, code=MISSING_SEQUENCE_ID_CODE))
                return
            call = to_call(request, raw, self._context.time_remaining(), sequence_headers(request))
            job = await self._plane.submit_stream(call)
        except Exception as exc:
            self._slots.release()
            await self._outbox.put(error_response(as_sluice_error(exc), sequence_id))
            return
        task = asyncio.create_task(self._forward(job, sequence_id), name="stream2-job")
        self._forwarders[task] = job
        task.add_done_callback(lambda done: self._forwarders.pop(done, None))

    async def _forward(self, job: StreamJob, sequence_id: str) -> None:
        suffix = sequence_suffix(sequence_id)
        try:
            async for reply in job.replies():
                await self._outbox.put(reply.payload + suffix)
        except Exception as exc:
            await self._outbox.put(error_response(as_sluice_error(exc), sequence_id))
        finally:
            job.close()
            self._slots.release()
