"""One StreamPredictions2 call (see :mod:`bidi_call` for how requests, jobs and responses flow): each
inbound PredictionsRequest becomes one streaming job whose replies go out as PredictionResponse
messages; a missing ``sequence_id`` or a failing job is answered in-stream with a ``status``. Several
sequences may share one call; a stateful model answers each sequence's requests in order, all on
the worker that holds it (the broker routes them).
"""

from collections.abc import AsyncGenerator
from dataclasses import dataclass

import grpc
from sluice.errors import ErrorCode, SluiceError, as_sluice_error

from sluice_gateway.dataplane import DataPlane
from sluice_gateway.grpc_api import RawContext
from sluice_gateway.grpc_api.bidi_call import BidiCall
from sluice_gateway.inflight import StreamJob
from sluice_gateway.sequences import SEQUENCE_ID_REQUIRED, SequenceHeaders
from sluice_gateway.torchserve.grpc_codec import error_response, parse_request, sequence_suffix, to_call

# TorchServe answers a missing sequence id with code INTERNAL (its BadRequestException, sent in-stream).
MISSING_SEQUENCE_ID_CODE = grpc.StatusCode.INTERNAL


@dataclass
class SequencedJob:
    job: StreamJob
    sequence_id: str

    def close(self) -> None:
        self.job.close()


class Stream2Call(BidiCall[SequencedJob]):
    name = "stream2"

    def __init__(
        self, plane: DataPlane, context: RawContext, *, max_in_flight: int, names: SequenceHeaders
    ) -> None:
        super().__init__(context, max_in_flight=max_in_flight)
        self._plane = plane
        self._names = names

    async def open(self, raw: bytes) -> SequencedJob | bytes:
        sequence_id = ""
        try:
            request = parse_request(raw)
            sequence_id = request.sequence_id
            if not sequence_id:
                error = SluiceError(ErrorCode.INVALID_ARGUMENT, SEQUENCE_ID_REQUIRED)
                return error_response(error, code=MISSING_SEQUENCE_ID_CODE)
            call = to_call(request, raw, self._context.time_remaining(), self._names)
            return SequencedJob(await self._plane.submit_stream(call), sequence_id)
        except Exception as exc:
            return error_response(as_sluice_error(exc), sequence_id)

    async def messages(self, job: SequencedJob) -> AsyncGenerator[bytes, None]:
        suffix = sequence_suffix(job.sequence_id)
        async for reply in job.job.replies():
            yield reply.payload + suffix

    def failure(self, job: SequencedJob, error: Exception) -> bytes:
        return error_response(as_sluice_error(error), job.sequence_id)
