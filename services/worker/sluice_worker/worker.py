"""The worker loop: read jobs, form batches, run the handler (inline on this loop's thread, or on the
torch thread), reply, ack.

Reliability lives here too: the claim scan for dead workers' jobs, the response-timeout watchdog,
a handler's ``sys.exit()``, Redis outages and SIGTERM draining (see docs/design.md, "Worker loop").
"""

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog
from sluice.errors import SluiceError
from sluice.log import get_logger

from sluice_worker import runtime
from sluice_worker.batch_policy import Batching, Run, next_step, split_batches
from sluice_worker.broker.outbox import Command
from sluice_worker.broker.source import BrokerUnavailable, JobSource
from sluice_worker.delivery import Delivery
from sluice_worker.exit_codes import ExitCode
from sluice_worker.handler_call import call_handler
from sluice_worker.inline_runner import InlineRunner
from sluice_worker.job_loop import JobLoop, request_ids
from sluice_worker.protocols import Protocols, TsRequest
from sluice_worker.replies import Outgoing, ReplyBook, failure
from sluice_worker.sequence_state import SequenceStates, StateUpdate
from sluice_worker.torch_thread import TorchThread

log = get_logger(__name__)

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


class Worker(JobLoop):
    """Plain batching: one handler call per batch, every job of it answered by that call."""

    def __init__(
        self,
        *,
        batching: Batching,
        response_timeout_s: float,
        claim_scan_interval_s: float,
        source: JobSource,
        torch_thread: TorchThread | InlineRunner,
        service: runtime.HandlerService,
        stopping: asyncio.Event,
        protocols: Protocols | None = None,
        sequences: SequenceStates | None = None,
        abandon: Callable[[list[Outgoing], list[Delivery]], list[Command]] | None = None,
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
        # A stateful model's: lost sequences, restoring and saving states (None: stateless).
        self._sequences = sequences
        # Handler requests of jobs read ahead while the previous batch ran (see _prefetch).
        self._prepared: dict[bytes, TsRequest | SluiceError] = {}
        # Running average of the handler's run times; until measured, calls count as slow enough.
        self._call_time_s = PREFETCH_CALL_S
        # An inline runner's: the commands that answer a call's jobs with these replies and ack them
        # (what its guard runs when it gives the call up).
        self._abandon = abandon

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

    async def _call_after_reading(
        self, call: Coroutine[Any, Any, tuple[list[Outgoing], ExitCode | None]]
    ) -> tuple[list[Outgoing], ExitCode | None, list[Delivery]]:
        """An inline call's read ahead: the loop is stopped while the handler runs, so one read of the
        jobs already waiting goes out just before the call and is taken in after it (the jobs that
        arrive during the call wait for the next read)."""
        ahead = asyncio.ensure_future(self._read_waiting(self._batching.batch_size))
        # Two loop turns: in the first the read is queued, in the second the pipelined client writes
        # it (once per turn); then the handler may stop the loop.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        try:
            results, exit_code = await call
        except BaseException:
            ahead.cancel()
            raise
        prefetched = await ahead
        for delivery in prefetched:
            self._prepared[delivery.receipt] = self._handler_request(delivery)
        return results, exit_code, prefetched

    async def _read_waiting(self, count: int) -> list[Delivery]:
        try:
            return await self._source.read(count, None)
        except BrokerUnavailable:
            return []  # the next read after the batch reports and retries

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
                read_ahead = (
                    self._call_after_reading
                    if isinstance(self._torch, InlineRunner)
                    else self._call_reading_ahead
                )
                results, exit_code, prefetched = await read_ahead(call)
            else:
                results, exit_code = await call
            self._call_time_s += CALL_TIME_WEIGHT * (self._torch.last_call_s - self._call_time_s)
            if self._sequences is not None and exit_code is None:
                results = await self._sequences.save(runnable, results, states)
            outgoing += results
        batch_size = len(runnable)
        self._finish(lambda: self._source.finish(outgoing, batch, batch_size=batch_size, states=states))
        return exit_code, prefetched

    async def _call_handler(
        self, runnable: list[Delivery], requests: list[TsRequest]
    ) -> tuple[list[Outgoing], ExitCode | None]:
        """The handler's outcome, logged with the batch's request ids (and only that: the read
        ahead that may run beside it logs without them)."""
        with structlog.contextvars.bound_contextvars(**request_ids(runnable)):
            return await self._handler_outcome(runnable, requests)

    async def _handler_outcome(
        self, runnable: list[Delivery], requests: list[TsRequest]
    ) -> tuple[list[Outgoing], ExitCode | None]:
        book = ReplyBook(runnable, started_unix_ms=int(time.time() * 1000), protocols=self._protocols)
        abandon = self._abandon
        return await call_handler(
            self._torch,
            self._service,
            requests,
            book,
            response_timeout_s=self._response_timeout_s,
            publish=self._publish,
            read=book.final,
            abandon=None if abandon is None else lambda outgoing: abandon(outgoing, runnable),
        )
