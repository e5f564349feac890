"""Continuous batching (model-config.yaml ``continuousBatching: true``), TorchServe 0.12's contract,
served by an iteration loop inside the worker.

The handler is called once per iteration with every running request plus new ones: a new request
carries its body, a running one only its request id and headers (the handler sees ``{}`` and finds
its state by ``context.request_ids``). Each row of the answer is one chunk (a token) for its request:
``ts_stream_next: true`` (set by the handler, or by TorchServe's ``create_predict_response`` from
``context.stopping_criteria``) keeps the request running, anything else ends it. A failed call
fails every running request, as TorchServe does. New jobs fill free slots (``batch_size`` - running)
without waiting while anything runs (:mod:`.continuous_policy`).

Unlike TorchServe, running requests never leave the worker between iterations, and each
iteration's answers leave in one write. A job stays pending in its stream until its last answer, so
a worker's death hands it to a peer, which starts it again (the gateway fails a call whose chunks
already reached its client rather than splice two attempts). Requests whose deadline passed or whose
client went away are dropped before the next iteration: their ids disappear from the handler's view
and their slots are free at once.
"""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from sluice.errors import SluiceError
from sluice.log import get_logger

from sluice_worker import runtime
from sluice_worker.batch_policy import Batching, Run, is_expired
from sluice_worker.broker.source import BrokerUnavailable, JobSource
from sluice_worker.continuous_policy import next_fill
from sluice_worker.delivery import Delivery
from sluice_worker.exit_codes import ExitCode
from sluice_worker.handler_call import call_handler
from sluice_worker.job_loop import (
    CANCEL_CHECK_AFTER_MS,
    CANCELLED,
    DEADLINE_PASSED_RUNNING,
    JobLoop,
    request_ids,
)
from sluice_worker.protocols import Protocols, TsRequest
from sluice_worker.replies import Outgoing, ReplyBook, failure
from sluice_worker.sequence_state import SequenceStates, StateUpdate
from sluice_worker.torch_thread import TorchThread

log = get_logger(__name__)

# How often the cancel flags of running requests are looked at (beside an iteration, never in its
# way): a client that went away frees its slot within about this long.
CANCEL_POLL_S = 0.02

# A cancel-flag look-up in flight: the job ids looked up, and the flags to come.
CancelCheck = tuple[list[str], "asyncio.Task[list[bool]]"]


@dataclass
class Running:
    """A request in the iteration loop."""

    delivery: Delivery
    # Its handler request on the first call; later calls send its id and headers only.
    request: TsRequest
    next_seq: int = 0
    # A client that takes one answer (Job.final_only): the chunks so far, joined into the last.
    chunks: list[bytes] | None = None
    called: bool = False

    @property
    def job_id(self) -> str:
        return self.delivery.job_id

    def handler_request(self) -> TsRequest:
        if not self.called:
            return self.request
        return {"requestId": self.request["requestId"], "parameters": [], "headers": self.request["headers"]}


class ContinuousWorker(JobLoop):
    def __init__(
        self,
        *,
        batching: Batching,
        response_timeout_s: float,
        claim_scan_interval_s: float,
        source: JobSource,
        torch_thread: TorchThread,
        service: runtime.HandlerService,
        stopping: asyncio.Event,
        protocols: Protocols | None = None,
        sequences: SequenceStates | None = None,
    ) -> None:
        super().__init__(
            batching=batching,
            response_timeout_s=response_timeout_s,
            claim_scan_interval_s=claim_scan_interval_s,
            source=source,
            stopping=stopping,
            protocols=protocols,
        )
        self._torch = torch_thread
        self._service = service
        self._sequences = sequences
        # The running set, in arrival order (the handler sees them in this order).
        self._running: dict[str, Running] = {}
        # Sequence state changes to record with the next replies (stateful models).
        self._states: dict[str, StateUpdate] = {}
        self._cancels_due_at = 0.0
        # Jobs read while the last iteration ran, and whether that read found the queue empty.
        self._ahead: list[Delivery] = []
        self._queue_drained = False

    @property
    def running(self) -> int:
        """Requests in the iteration loop (the heartbeat reports it)."""
        return len(self._running)

    async def serve(self) -> ExitCode:
        new = await self._scan([])
        next_scan_at = time.monotonic() + self._claim_scan_interval_s
        while True:
            if self._stopping.is_set() and not self._running and not new:
                await self._confirm()
                return ExitCode.OK
            new = await self._fill(new, looked=self._queue_drained)
            if time.monotonic() >= next_scan_at:
                held = [r.delivery for r in self._running.values()] + new
                new += await self._scan(held)
                next_scan_at = time.monotonic() + self._claim_scan_interval_s
            # Jobs beyond the free slots (read ahead while every slot was taken) wait in hand.
            free = max(0, self._batching.batch_size - len(self._running))
            outgoing, done = await self._admit(new[:free])
            new = new[free:]
            outgoing += self._drop_expired(done)
            if not self._running:
                if outgoing or done:
                    self._send(outgoing, done, batch_size=0)
                continue
            exit_code = await self._iterate(outgoing, done)
            if exit_code is not None:
                await self._confirm()
                return exit_code
            new, self._ahead = new + self._ahead, []

    async def _fill(self, new: list[Delivery], *, looked: bool) -> list[Delivery]:
        """Read new jobs for the next iteration, as the policy says (``looked``: the queue was found
        empty while the last iteration ran)."""
        first_at = time.monotonic() if new else None
        while True:
            waited_ms = 0.0 if first_at is None else (time.monotonic() - first_at) * 1000
            step = next_fill(
                self._batching,
                running=len(self._running),
                new=len(new),
                waited_ms=waited_ms,
                looked=looked,
                stopping=self._stopping.is_set(),
            )
            if isinstance(step, Run):
                return new
            idle = not self._running and not new
            got = await self._read(step.count, step.block_ms, filling=not idle)
            looked = True
            if got and first_at is None:
                first_at = time.monotonic()
            new = new + got
            if idle and not got:
                return new  # back to the loop: SIGTERM, the claim scan

    async def _admit(self, new: list[Delivery]) -> tuple[list[Outgoing], list[Delivery]]:
        """New jobs into the running set; replies and acks for those that will not run."""
        outgoing: list[Outgoing] = []
        current = new
        if self._sequences is not None and new:
            current, outgoing = await self._sequences.restore(new, self._states)
        live, skipped = await self._screen(current)
        outgoing += skipped
        for delivery in live:
            built = self._handler_request(delivery)
            if isinstance(built, SluiceError):
                outgoing.append(failure(delivery, built))
                continue
            chunks: list[bytes] | None = [] if delivery.job.final_only else None
            self._running[delivery.job_id] = Running(delivery, built, chunks=chunks)
        return outgoing, [d for d in new if d.job_id not in self._running]

    def _drop_expired(self, done: list[Delivery]) -> list[Outgoing]:
        """Running requests whose deadline passed leave the loop (their client has gone)."""
        now_ms = int(time.time() * 1000)
        expired = [r for r in self._running.values() if is_expired(r.delivery.job.deadline_unix_ms, now_ms)]
        return self._drop(expired, DEADLINE_PASSED_RUNNING, done)

    def _drop(self, leaving: Sequence[Running], error: SluiceError, done: list[Delivery]) -> list[Outgoing]:
        outgoing = []
        for running in leaving:
            del self._running[running.job_id]
            done.append(running.delivery)
            log.info("request left the iteration loop", request_id=running.job_id, reason=error.code.value)
            outgoing.append(failure(running.delivery, error, seq=running.next_seq))
        return outgoing

    async def _iterate(self, outgoing: list[Outgoing], done: list[Delivery]) -> ExitCode | None:
        """One handler call over the running set; its answers and acks leave in one write."""
        running = list(self._running.values())
        deliveries = [r.delivery for r in running]
        book = ReplyBook(
            deliveries,
            started_unix_ms=int(time.time() * 1000),
            protocols=self._protocols,
            seqs={r.job_id: r.next_seq for r in running},
            joining={r.job_id: r.chunks for r in running if r.chunks is not None},
        )
        cancel_check = self._cancel_check(running)
        ahead = self._read_ahead(len(running))
        with structlog.contextvars.bound_contextvars(**request_ids(deliveries)):
            answers, exit_code = await call_handler(
                self._torch,
                self._service,
                [r.handler_request() for r in running],
                book,
                response_timeout_s=self._response_timeout_s,
                publish=self._publish,
                read=book.iteration,
            )
        outgoing += answers
        finished = []
        for item in running:
            item.called = True
            if book.finished(item.job_id):
                del self._running[item.job_id]
                finished.append(item.delivery)
            else:
                item.next_seq = book.next_seq(item.job_id)
        if self._sequences is not None and exit_code is None and finished:
            outgoing = await self._sequences.save(finished, outgoing, self._states)
        done += finished
        outgoing += await self._cancelled(cancel_check, done)
        self._ahead, self._queue_drained = await ahead
        # The last iteration's answers are in Redis before these go: a resend after an outage can
        # never land behind a later chunk of the same stream.
        await self._confirm()
        self._send(outgoing, done, batch_size=len(running))
        return exit_code

    def _read_ahead(self, running: int) -> "asyncio.Future[tuple[list[Delivery], bool]]":
        """Read the jobs already waiting while the handler runs (never a blocking read, so never one
        an idle peer was waiting for), so that the next iteration's newcomers are in hand without a
        round trip of their own: as many as the slots free now, at least one (slots free up as
        requests end). Resolves to the jobs, and whether the queue had no more."""
        if self._stopping.is_set():
            return _resolved(([], True))
        count = max(1, self._batching.batch_size - running)
        return asyncio.ensure_future(self._look(count))

    async def _look(self, count: int) -> tuple[list[Delivery], bool]:
        try:
            got = await self._source.read(count, None)
        except BrokerUnavailable:
            return [], False  # the next fill reads, and reports the outage
        return got, len(got) < count

    def _cancel_check(self, running: list[Running]) -> "CancelCheck | None":
        """Look up the cancel flags of running requests while the handler runs (when due)."""
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        waited = [
            r.delivery for r in running if now_ms - r.delivery.job.enqueued_unix_ms >= CANCEL_CHECK_AFTER_MS
        ]
        if now < self._cancels_due_at or not waited:
            return None
        self._cancels_due_at = now + CANCEL_POLL_S
        return [d.job_id for d in waited], asyncio.ensure_future(self._flags(waited))

    async def _flags(self, deliveries: list[Delivery]) -> list[bool]:
        try:
            return await self._source.cancelled(deliveries)
        except BrokerUnavailable:
            return [False] * len(deliveries)  # looked at again with the next check

    async def _cancelled(self, check: "CancelCheck | None", done: list[Delivery]) -> list[Outgoing]:
        """Drop the running requests whose client went away (the check's answer)."""
        if check is None:
            return []
        job_ids, flags = check[0], await check[1]
        gone = {job_id for job_id, flag in zip(job_ids, flags, strict=True) if flag}
        return self._drop([r for r in self._running.values() if r.job_id in gone], CANCELLED, done)

    def _send(self, outgoing: list[Outgoing], done: list[Delivery], *, batch_size: int) -> None:
        states, self._states = self._states, {}
        self._finish(lambda: self._source.finish(outgoing, done, batch_size=batch_size, states=states))


def _resolved(value: tuple[list[Delivery], bool]) -> "asyncio.Future[tuple[list[Delivery], bool]]":
    future: asyncio.Future[tuple[list[Delivery], bool]] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
