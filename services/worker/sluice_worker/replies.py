"""Turning handler results into replies for one batch: sequence numbers per job, at most one final
reply per job, and the failure replies TorchServe would give.

A :class:`ReplyBook` is used from the torch thread (intermediate results) and from the event loop
(final results, watchdog), so its state sits behind a lock.
"""

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError

from sluice_worker.delivery import Delivery
from sluice_worker.frames import FrameRow, PredictFrame
from sluice_worker.protocols import Protocols

WORKER_DIED = SluiceError(ErrorCode.WORKER_DIED, "Worker died.")
NO_RESULT = SluiceError(ErrorCode.INTERNAL, "The handler returned no result for this request.")


@dataclass(frozen=True)
class Outgoing:
    """A reply and the stream it goes to."""

    reply_to: str
    reply: Reply


def failure(delivery: Delivery, error: SluiceError, seq: int = 0, started_unix_ms: int = 0) -> Outgoing:
    """A final failure reply; ``error_code`` is the ErrorCode name, ``status_code`` the HTTP status.
    ``started_unix_ms`` is 0 for a job that never reached the handler."""
    reply = Reply(
        job_id=delivery.job_id,
        seq=seq,
        final=True,
        status_code=error.http_status,
        message=error.message,
        error_code=error.code.value,
        attempt=delivery.attempt,
        started_unix_ms=started_unix_ms,
    )
    return Outgoing(delivery.job.reply_to, reply)


def handler_failure(frame: PredictFrame) -> SluiceError:
    """A batch-level error frame (PredictionException, "Prediction failed", ...) as a domain error."""
    return SluiceError(ErrorCode.HANDLER_FAILED, frame.message, http_status=frame.code)


class ReplyBook:
    def __init__(
        self,
        deliveries: Iterable[Delivery],
        started_unix_ms: int = 0,
        protocols: Protocols | None = None,
    ) -> None:
        """``started_unix_ms``: when the batch was handed to the handler (the gateway's queue time);
        ``protocols``: the worker's wire protocols (they make payloads of results)."""
        self._started_unix_ms = started_unix_ms
        self._protocols = protocols or Protocols()
        self._deliveries = {delivery.job_id: delivery for delivery in deliveries}
        self._next_seq = dict.fromkeys(self._deliveries, 0)
        self._finished: set[str] = set()
        self._lock = threading.Lock()

    def unfinished(self) -> list[Delivery]:
        with self._lock:
            return [d for job_id, d in self._deliveries.items() if job_id not in self._finished]

    def intermediate(self, frame: PredictFrame) -> list[Outgoing]:
        """Replies for a frame the handler sent with ``send_intermediate_predict_response``.

        Every job gets them, streaming or not: whether a call streams is the gateway's business (a
        TorchServe REST call streams from inside a batch; a unary gRPC call keeps only the final).
        An error frame finishes its jobs, as TorchServe's frontend does."""
        with self._lock:
            if not frame.ok:
                error = handler_failure(frame)
                return [self._fail(d, error) for d in self._open(row.request_id for row in frame.rows)]
            out = []
            for row in frame.rows:
                delivery = self._open_one(row.request_id)
                if delivery is not None:
                    out.append(self._result(delivery, row, final=False))
            return out

    def final(self, frame: PredictFrame) -> list[Outgoing]:
        """Final replies for every unfinished job of the batch, from ``Service.predict``'s frame."""
        with self._lock:
            if not frame.ok:
                error = handler_failure(frame)
                return [self._fail(d, error) for d in self._open(self._deliveries)]
            out = []
            for row in frame.rows:
                delivery = self._open_one(row.request_id)
                if delivery is not None:
                    out.append(self._result(delivery, row, final=True))
            out.extend(self._fail(d, NO_RESULT) for d in self._open(self._deliveries))
            return out

    def fail_all(self, error: SluiceError) -> list[Outgoing]:
        """Final failure replies for every unfinished job (handler timeout, ``sys.exit()``...)."""
        with self._lock:
            return [self._fail(d, error) for d in self._open(self._deliveries)]

    def _open(self, job_ids: Iterable[str]) -> list[Delivery]:
        return [d for d in (self._open_one(job_id) for job_id in job_ids) if d is not None]

    def _open_one(self, job_id: str) -> Delivery | None:
        # A handler may report ids that are not ours (a custom request id map): those are dropped.
        return None if job_id in self._finished else self._deliveries.get(job_id)

    def _take_seq(self, delivery: Delivery, final: bool) -> int:
        seq = self._next_seq[delivery.job_id]
        self._next_seq[delivery.job_id] = seq + 1
        if final:
            self._finished.add(delivery.job_id)
        return seq

    def _fail(self, delivery: Delivery, error: SluiceError) -> Outgoing:
        seq = self._take_seq(delivery, final=True)
        return failure(delivery, error, seq=seq, started_unix_ms=self._started_unix_ms)

    def _result(self, delivery: Delivery, row: FrameRow, final: bool) -> Outgoing:
        try:
            payload = self._protocols.reply_payload(delivery.job, row.body)
        except SluiceError as error:  # a result the protocol cannot answer with fails its job only
            return self._fail(delivery, error)
        reply = Reply(
            job_id=delivery.job_id,
            seq=self._take_seq(delivery, final),
            final=final,
            status_code=row.status_code,
            payload=payload,
            attempt=delivery.attempt,
            headers=row.headers,
            content_type=row.content_type,
            reason_phrase=row.reason_phrase,
            started_unix_ms=self._started_unix_ms,
        )
        return Outgoing(delivery.job.reply_to, reply)
