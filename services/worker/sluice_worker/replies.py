"""Turning handler results into replies for one batch: sequence numbers per job, at most one final
reply per job, and the failure replies TorchServe would give.

A generative model's job lives across many handler calls (continuous batching's iterations): each
call gets a book that starts from the job's next sequence number (``seqs``), and a job whose client
takes one answer (``Job.final_only``) has its chunks held (``joining``) and joined into its final
reply instead of sent.

A :class:`ReplyBook` is used from the torch thread (intermediate results) and from the event loop
(final results, watchdog), so its state sits behind a lock.
"""

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError

from sluice_worker.delivery import Delivery
from sluice_worker.frames import FrameRow, PredictFrame
from sluice_worker.protocols import Protocols

WORKER_DIED = SluiceError(ErrorCode.WORKER_DIED, "Worker died.")
# The response header with which a continuous-batching handler keeps a request running (TorchServe's).
STREAM_NEXT_HEADER = "ts_stream_next"
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
        *,
        seqs: Mapping[str, int] | None = None,
        joining: Mapping[str, list[bytes]] | None = None,
    ) -> None:
        """``started_unix_ms``: when the batch was handed to the handler (the gateway's queue time);
        ``protocols``: the worker's wire protocols (they make payloads of results); ``seqs``: the
        next sequence number of jobs that already sent replies; ``joining``: the chunks held so far
        of jobs whose chunks are joined (the lists grow in place)."""
        self._started_unix_ms = started_unix_ms
        self._protocols = protocols or Protocols()
        self._deliveries = {delivery.job_id: delivery for delivery in deliveries}
        self._next_seq = {job_id: (seqs or {}).get(job_id, 0) for job_id in self._deliveries}
        self._joining = joining or {}
        self._finished: set[str] = set()
        self._lock = threading.Lock()

    def unfinished(self) -> list[Delivery]:
        with self._lock:
            return [d for job_id, d in self._deliveries.items() if job_id not in self._finished]

    def next_seq(self, job_id: str) -> int:
        with self._lock:
            return self._next_seq[job_id]

    def finished(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._finished

    def iteration(self, frame: PredictFrame) -> list[Outgoing]:
        """Replies for one continuous-batching iteration: a row whose ``ts_stream_next`` header is
        ``true`` is an intermediate result and its job runs on; any other row ends its job. A failed
        frame fails every job of the call, as TorchServe does; a job without a row fails."""
        return self._answers(frame, lambda row: row.headers.get(STREAM_NEXT_HEADER) != "true")

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
                    out.extend(self._emit(delivery, row, final=False))
            return out

    def final(self, frame: PredictFrame) -> list[Outgoing]:
        """Final replies for every unfinished job of the batch, from ``Service.predict``'s frame."""
        return self._answers(frame, lambda _row: True)

    def _answers(self, frame: PredictFrame, ends: Callable[[FrameRow], bool]) -> list[Outgoing]:
        with self._lock:
            if not frame.ok:
                error = handler_failure(frame)
                return [self._fail(d, error) for d in self._open(self._deliveries)]
            out = []
            for row in frame.rows:
                delivery = self._open_one(row.request_id)
                if delivery is not None:
                    out.extend(self._emit(delivery, row, final=ends(row)))
            answered = {row.request_id for row in frame.rows}
            out.extend(
                self._fail(d, NO_RESULT) for d in self._open(j for j in self._deliveries if j not in answered)
            )
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

    def _emit(self, delivery: Delivery, row: FrameRow, final: bool) -> list[Outgoing]:
        """The reply for one row, or none for a chunk held to be joined. A joined job's chunk that
        is not a success ends it with that row, so its client sees the status."""
        chunks = self._joining.get(delivery.job_id)
        if chunks is None:
            return [self._result(delivery, row, final)]
        if row.status_code != 200:
            return [self._result(delivery, row, final=True)]
        if not final:
            chunks.append(row.body)
            return []
        try:
            body = self._protocols.join(delivery.job, [*chunks, row.body])
        except SluiceError as error:
            return [self._fail(delivery, error)]
        return [
            self._result(
                delivery,
                FrameRow(
                    row.request_id, row.status_code, body, row.content_type, row.reason_phrase, row.headers
                ),
                final=True,
            )
        ]

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
