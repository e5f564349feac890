"""The worker loop: read jobs, form batches, run the handler on the torch thread, reply, ack.

Reliability lives here too: the claim scan for dead workers' jobs, the response-timeout watchdog,
a handler's ``sys.exit()``, Redis outages and SIGTERM draining (see docs/design.md, "Worker loop").
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import structlog
from sluice.backoff import Backoff
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger

from sluice_worker import frames, runtime
from sluice_worker.batch_policy import Batching, Run, is_expired, next_step, split_batches
from sluice_worker.broker.source import BrokerUnavailable, JobSource
from sluice_worker.delivery import Delivery
from sluice_worker.exit_codes import ExitCode
from sluice_worker.protocols import Protocols, TsRequest
from sluice_worker.replies import WORKER_DIED, Outgoing, ReplyBook, failure
from sluice_worker.retries import until_done
from sluice_worker.sequence_state import SequenceStates, StateUpdate
from sluice_worker.sink import ReplySink
from sluice_worker.torch_thread import HandlerExit, TorchThread

log = get_logger(__name__)

# Pause between polls of the job stream while a batch fills (see Worker._read).
FILL_POLL_S = 0.001
# While the handler runs, the stream is polled for the next batch at these growing intervals (see
# Worker._prefetch), once the handler runs PREFETCH_CALL_S per call on average on the torch thread: a
# 25-200 ms CNN batch is read ahead; a 0.2 ms mlp batch is not. (Its call still takes 1-2 ms of wall
# time under load, thread hand-offs included; reads made then competed with the torch thread for the
# GIL and cost ~5% of mlp throughput.)
PREFETCH_FIRST_POLL_S = 0.001
PREFETCH_MAX_POLL_S = 0.008
PREFETCH_CALL_S = 0.002
# Weight of the latest call in the running average of handler run times.
CALL_TIME_WEIGHT = 0.2
# Jobs younger than this are run without looking for a cancel flag first: their client is very
# likely still there, and the look costs a round trip on the hot path. (A job whose client did leave
# is run for nothing; its reply is dropped by the gateway.)
CANCEL_CHECK_AFTER_MS = 20
DEADLINE_PASSED = SluiceError(
    ErrorCode.DEADLINE_EXCEEDED, "Request deadline exceeded before the job started."
)
CANCELLED = SluiceError(ErrorCode.CANCELLED, "Request cancelled by the client.")
# An error around the handler call (not inside the handler): answered like a handler exception.
PREDICTION_FAILED = SluiceError(ErrorCode.HANDLER_FAILED, "Prediction failed", http_status=503)


class Worker:
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
        self._batching = batching
        self._response_timeout_s = response_timeout_s
        self._claim_scan_interval_s = claim_scan_interval_s
        self._source = source
        self._torch = torch_thread
        self._service = service
        # Set on SIGTERM: stop reading, finish the jobs in hand.
        self._stopping = stopping
        self._read_backoff = Backoff()
        # How each job's request becomes a handler row and each result a reply payload.
        self._protocols = protocols or Protocols()
        # A stateful model's: lost sequences, restoring and saving states (None: stateless).
        self._sequences = sequences
        # Replies and acks sent but not yet confirmed (see _finish), with how to send them again.
        self._unconfirmed: list[tuple[Awaitable[None], Callable[[], Awaitable[None]]]] = []
        # Handler requests of jobs read ahead while the previous batch ran (see _prefetch).
        self._prepared: dict[bytes, TsRequest | SluiceError] = {}
        # Running average of the handler's run times; until measured, calls count as slow enough.
        self._call_time_s = PREFETCH_CALL_S

    async def serve(self) -> ExitCode:
        held = await self._scan(held=[])
        next_scan_at = time.monotonic() + self._claim_scan_interval_s
        while True:
            if self._stopping.is_set() and not held:
                await self._confirm()
                return ExitCode.OK
            held = await self._collect(held)
            if time.monotonic() >= next_scan_at:
                held += await self._scan(held)
                next_scan_at = time.monotonic() + self._claim_scan_interval_s
            batches = split_batches(held, self._batching.batch_size)
            held = []
            for index, batch in enumerate(batches):
                exit_code, prefetched = await self._run(batch, prefetch=index == len(batches) - 1)
                held += prefetched
                if exit_code is not None:
                    # Jobs of later batches stay pending under this consumer; peers reclaim them.
                    await self._confirm()
                    return exit_code

    async def _collect(self, held: list[Delivery]) -> list[Delivery]:
        """Read until the batch policy says run (or an idle read came back empty)."""
        first_at = time.monotonic() if held else None
        while True:
            if self._stopping.is_set() and not held:
                return held
            streaming = sum(1 for d in held if d.job.streaming)
            waited_ms = 0.0 if first_at is None else (time.monotonic() - first_at) * 1000
            step = next_step(
                self._batching,
                batchable=len(held) - streaming,
                streaming=streaming,
                waited_ms=waited_ms,
                stopping=self._stopping.is_set(),
            )
            if isinstance(step, Run):
                return held
            got = await self._read(step.count, step.block_ms, filling=bool(held))
            if got and first_at is None:
                first_at = time.monotonic()
            held = held + got
            if not held:
                return held

    async def _read(self, count: int, block_ms: int, *, filling: bool) -> list[Delivery]:
        """Read new jobs. While a batch fills, poll instead of blocking: Redis checks blocked readers'
        timeouts on its 100 ms timer (hz 10), so ``BLOCK 5`` would return after ~100 ms and the batch
        would wait far past ``max_batch_delay``. (A new entry wakes a blocked reader at once; only the
        timeout is coarse, so the idle read keeps blocking.)"""
        try:
            got = await self._source.read(count, None if filling else block_ms)
        except BrokerUnavailable as exc:
            delay_s = self._read_backoff.next_delay_s()
            log.warning("reading jobs failed, retrying", error=str(exc), retry_in_s=delay_s)
            await asyncio.sleep(delay_s)
            got = []
        else:
            self._read_backoff.reset()
        # The read went out in the same write as the last batch's replies, which came back first.
        await self._confirm()
        if filling and not got:
            await asyncio.sleep(min(FILL_POLL_S, block_ms / 1000))
        return got

    async def _scan(self, held: list[Delivery]) -> list[Delivery]:
        try:
            return await self._source.rescue({delivery.receipt for delivery in held})
        except BrokerUnavailable as exc:
            log.warning("claim scan failed, will retry", error=str(exc))
            return []

    async def _prefetch(self, call: "asyncio.Future[Any]") -> list[Delivery]:
        """Jobs already waiting in the stream, read while the handler runs, so that the next batch is
        in hand, its handler requests built, when it returns, instead of costing a read and a decode
        while torch sits idle (~8% of a CNN worker's time without it).

        Never a blocking read: a job is only waiting unread when no worker of the version was
        blocked in a read for it, so this never takes a job from an idle peer. Stops at a full
        batch, when the handler returns, or on SIGTERM; a failed read ends it quietly (the next
        read after the batch reports and retries).
        """
        got: list[Delivery] = []
        poll_s = PREFETCH_FIRST_POLL_S
        while len(got) < self._batching.batch_size:
            done, _ = await asyncio.wait((call,), timeout=poll_s)
            if done or self._stopping.is_set():
                break
            try:
                new = await self._source.read(self._batching.batch_size - len(got), None)
            except BrokerUnavailable:
                break
            for delivery in new:
                self._prepared[delivery.receipt] = self._handler_request(delivery)
            got += new
            poll_s = min(poll_s * 2, PREFETCH_MAX_POLL_S)
        return got

    async def _call_reading_ahead(
        self, call: Coroutine[Any, Any, tuple[list[Outgoing], ExitCode | None]]
    ) -> tuple[list[Outgoing], ExitCode | None, list[Delivery]]:
        task = asyncio.ensure_future(call)
        try:
            prefetched = await self._prefetch(task)
            results, exit_code = await task
        finally:
            task.cancel()  # only if this task was cancelled meanwhile (shutdown)
        return results, exit_code, prefetched

    def _handler_request(self, delivery: Delivery) -> TsRequest | SluiceError:
        try:
            return self._protocols.handler_request(delivery.job)
        except SluiceError as error:
            return error

    async def _run(self, batch: list[Delivery], *, prefetch: bool) -> tuple[ExitCode | None, list[Delivery]]:
        """One handler call for ``batch`` (minus skipped jobs), then replies and acks in one pipeline.
        With ``prefetch``, also the jobs read for the next batch meanwhile."""
        prepared = {delivery.receipt: self._prepared.pop(delivery.receipt, None) for delivery in batch}
        states: dict[str, StateUpdate] = {}
        outgoing: list[Outgoing] = []
        current = batch
        if self._sequences is not None:
            current, outgoing = await self._sequences.restore(batch, states)
        live, skipped = await self._screen(current)
        outgoing += skipped
        requests: list[TsRequest] = []
        runnable: list[Delivery] = []
        for delivery in live:
            built = prepared[delivery.receipt] or self._handler_request(delivery)
            if isinstance(built, SluiceError):
                outgoing.append(failure(delivery, built))
            else:
                requests.append(built)
                runnable.append(delivery)
        exit_code = None
        prefetched: list[Delivery] = []
        if runnable:
            call = self._call_handler(runnable, requests)
            if prefetch and self._call_time_s >= PREFETCH_CALL_S:
                results, exit_code, prefetched = await self._call_reading_ahead(call)
            else:
                results, exit_code = await call
            self._call_time_s += CALL_TIME_WEIGHT * (self._torch.last_call_s - self._call_time_s)
            if self._sequences is not None and exit_code is None:
                results = await self._sequences.save(runnable, results, states)
            outgoing += results
        batch_size = len(runnable)
        self._finish(lambda: self._source.finish(outgoing, batch, batch_size=batch_size, states=states))
        return exit_code, prefetched

    def _finish(self, send: Callable[[], Awaitable[None]]) -> None:
        """Send a batch's replies and ack now, confirm them later: they then leave in one write with
        the next read instead of costing a round trip of their own."""
        self._unconfirmed.append((send(), send))

    async def _confirm(self) -> None:
        """Wait for the answers to what :meth:`_finish` sent; send again what a Redis outage lost
        (a duplicate reply is dropped by the gateway, a second ack does nothing)."""
        unconfirmed, self._unconfirmed = self._unconfirmed, []
        for sent, send in unconfirmed:
            try:
                await sent
            except BrokerUnavailable:
                await until_done(send, "reply and ack")

    async def _screen(self, batch: list[Delivery]) -> tuple[list[Delivery], list[Outgoing]]:
        """Jobs worth running, and replies for those whose client already gave up."""
        now_ms = int(time.time() * 1000)
        outgoing = [failure(d, DEADLINE_PASSED) for d in batch if is_expired(d.job.deadline_unix_ms, now_ms)]
        current = [d for d in batch if not is_expired(d.job.deadline_unix_ms, now_ms)]
        waited = [d for d in current if now_ms - d.job.enqueued_unix_ms >= CANCEL_CHECK_AFTER_MS]
        flags = await until_done(lambda: self._source.cancelled(waited), "cancel check") if waited else []
        cancelled = {d.job_id for d, flag in zip(waited, flags, strict=True) if flag}
        outgoing += [failure(d, CANCELLED) for d in waited if d.job_id in cancelled]
        for reply in outgoing:
            log.info("skipping job", request_id=reply.reply.job_id, reason=reply.reply.error_code)
        return [d for d in current if d.job_id not in cancelled], outgoing

    async def _call_handler(
        self, runnable: list[Delivery], requests: list[TsRequest]
    ) -> tuple[list[Outgoing], ExitCode | None]:
        """The handler's outcome, logged with the batch's request ids (and only that: the read
        ahead that may run beside it logs without them)."""
        with structlog.contextvars.bound_contextvars(**_request_ids(runnable)):
            return await self._handler_outcome(runnable, requests)

    async def _handler_outcome(
        self, runnable: list[Delivery], requests: list[TsRequest]
    ) -> tuple[list[Outgoing], ExitCode | None]:
        book = ReplyBook(runnable, started_unix_ms=int(time.time() * 1000), protocols=self._protocols)
        sink = ReplySink(book, self._publish, asyncio.get_running_loop())
        try:
            raw = await asyncio.wait_for(
                self._torch.run(runtime.predict, self._service, requests, sink), self._response_timeout_s
            )
            return book.final(frames.decode(raw)), None
        except TimeoutError:
            log.error(
                "handler exceeded response_timeout; the worker exits",
                response_timeout_s=self._response_timeout_s,
            )
            return book.fail_all(WORKER_DIED), ExitCode.HANDLER_DIED
        except HandlerExit as exc:
            log.error("handler exited the worker", cause=repr(exc.cause))
            return book.fail_all(WORKER_DIED), ExitCode.HANDLER_DIED
        except Exception:
            log.exception("handler call failed outside the handler")
            return book.fail_all(PREDICTION_FAILED), None
        finally:
            sink.close()

    async def _publish(self, outgoing: Sequence[Outgoing]) -> None:
        await until_done(lambda: self._source.publish(outgoing), "intermediate reply")


def _request_ids(deliveries: list[Delivery]) -> dict[str, object]:
    if len(deliveries) == 1:
        return {"request_id": deliveries[0].job_id}
    return {"request_ids": [d.job_id for d in deliveries]}
