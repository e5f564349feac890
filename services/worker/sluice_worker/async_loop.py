"""Async handlers (model-config.yaml ``asyncCommunication: true``, ``async def handle``), as TorchServe
0.12's async worker serves them: every job is its own handler call, many run at once on the handler
loop (:mod:`.handler_loop`), each with its own copy of the context, intermediate answers sent as
they come. TorchServe caps nothing (the engine behind the handler does, e.g. vLLM's
``max_num_seqs``); Sluice runs at most ``slots`` calls per worker (``maxConcurrentRequests``, default
8 x batchSize) and leaves the rest queued for its peers.

A call whose client went away or whose deadline passed is cancelled on the handler loop (the handler
sees ``asyncio.CancelledError`` at its next await); one that runs past ``responseTimeout`` is
cancelled and answered with a timeout error, and the worker goes on serving the others.
"""

import asyncio
import concurrent.futures
import contextlib
import time
from dataclasses import dataclass, field

from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger

from sluice_worker import frames, runtime
from sluice_worker.batch_policy import Batching, is_expired
from sluice_worker.broker.source import BrokerUnavailable, JobSource
from sluice_worker.delivery import Delivery
from sluice_worker.exit_codes import ExitCode
from sluice_worker.handler_loop import HandlerLoop
from sluice_worker.job_loop import (
    CANCEL_CHECK_AFTER_MS,
    CANCELLED,
    DEADLINE_PASSED_RUNNING,
    PREDICTION_FAILED,
    JobLoop,
)
from sluice_worker.protocols import Protocols, TsRequest
from sluice_worker.replies import WORKER_DIED, ReplyBook, failure
from sluice_worker.reply_pump import ReplyPump
from sluice_worker.sink import ForwardingSink

log = get_logger(__name__)

# While calls run, the job stream is looked at this often for jobs to fill free slots (a blocking
# read would hold up the replies that share its connection).
POLL_S = 0.005
# How often running calls' deadlines and cancel flags are looked at.
WATCH_S = 0.02
TIMED_OUT = SluiceError(
    ErrorCode.HANDLER_FAILED, "Prediction timed out: the handler ran past responseTimeout.", http_status=504
)


@dataclass
class Call:
    delivery: Delivery
    future: "concurrent.futures.Future[bytes]"
    # Why the call was cancelled on the handler loop (None: it was not).
    aborted: SluiceError | None = None
    task: "asyncio.Task[None] | None" = field(default=None, repr=False)


class AsyncWorker(JobLoop):
    def __init__(
        self,
        *,
        batching: Batching,
        response_timeout_s: float,
        claim_scan_interval_s: float,
        source: JobSource,
        handler_loop: HandlerLoop,
        service: runtime.HandlerService,
        stopping: asyncio.Event,
        slots: int,
        protocols: Protocols | None = None,
    ) -> None:
        super().__init__(
            batching=batching,
            response_timeout_s=response_timeout_s,
            claim_scan_interval_s=claim_scan_interval_s,
            source=source,
            stopping=stopping,
            protocols=protocols,
        )
        self._handler_loop = handler_loop
        self._service = service
        self._slots = slots
        self._calls: dict[str, Call] = {}
        self._slot_freed = asyncio.Event()
        self._pump = ReplyPump(source)
        self._exit_code: ExitCode | None = None

    @property
    def running(self) -> int:
        """Calls in flight (the heartbeat reports it)."""
        return len(self._calls)

    async def serve(self) -> ExitCode:
        pump = asyncio.create_task(self._pump.run(), name="reply-pump")
        watch = asyncio.create_task(self._watch(), name="call-watch")
        try:
            await self._start(await self._scan([]))
            await self._serve()
            while self._calls and self._exit_code is None:
                await self._wait_for_slot(self._batching.max_block_ms / 1000)
            await self._pump.drained()
        finally:
            watch.cancel()
            pump.cancel()
        return self._exit_code or ExitCode.OK

    async def _serve(self) -> None:
        next_scan_at = time.monotonic() + self._claim_scan_interval_s
        while not self._stopping.is_set() and self._exit_code is None:
            if time.monotonic() >= next_scan_at:
                await self._start(await self._scan([call.delivery for call in self._calls.values()]))
                next_scan_at = time.monotonic() + self._claim_scan_interval_s
            free = self._slots - len(self._calls)
            if free <= 0:
                await self._wait_for_slot(self._batching.max_block_ms / 1000)
                continue
            if self._calls:
                got = await self._read(free, 0, filling=True)
                if not got:
                    await self._wait_for_slot(POLL_S)
            else:
                # Replies share the read's connection, and Redis answers a blocked reader's later
                # commands only once it unblocks: the last call's replies go first.
                await self._pump.drained()
                got = await self._read(free, self._batching.max_block_ms, filling=False)
            await self._start(got)

    async def _wait_for_slot(self, timeout_s: float) -> None:
        self._slot_freed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._slot_freed.wait(), timeout_s)

    async def _start(self, new: list[Delivery]) -> None:
        if not new:
            return
        live, skipped = await self._screen(new)
        done = [d for d in new if d not in live]
        for delivery in live:
            built = self._handler_request(delivery)
            if isinstance(built, SluiceError):
                skipped.append(failure(delivery, built))
                done.append(delivery)
            else:
                self._launch(delivery, built)
        if skipped or done:
            self._pump.put(skipped, done)

    def _launch(self, delivery: Delivery, request: TsRequest) -> None:
        joining: dict[str, list[bytes]] | None = {delivery.job_id: []} if delivery.job.final_only else None
        book = ReplyBook(
            [delivery], started_unix_ms=int(time.time() * 1000), protocols=self._protocols, joining=joining
        )
        sink = ForwardingSink(book, self._pump.put, asyncio.get_running_loop())
        future = self._handler_loop.submit(runtime.predict_async(self._service, [request], sink))
        call = Call(delivery, future)
        self._calls[delivery.job_id] = call
        call.task = asyncio.create_task(self._finish_call(call, book, sink), name=f"call-{delivery.job_id}")

    async def _finish_call(self, call: Call, book: ReplyBook, sink: ForwardingSink) -> None:
        try:
            raw = await asyncio.wait_for(asyncio.wrap_future(call.future), self._response_timeout_s)
            outgoing = book.final(frames.decode(raw))
        except TimeoutError:
            log.warning("call exceeded response_timeout; cancelled", request_id=call.delivery.job_id)
            outgoing = book.fail_all(TIMED_OUT)
        except asyncio.CancelledError:
            if call.aborted is None:
                raise  # the worker's own loop is ending
            outgoing = book.fail_all(call.aborted)
        except Exception:
            log.exception("handler call failed outside the handler", request_id=call.delivery.job_id)
            outgoing = book.fail_all(PREDICTION_FAILED)
        except BaseException as exc:  # sys.exit() in a handler: the worker exits, as in TorchServe
            log.error("handler exited the worker", cause=repr(exc), request_id=call.delivery.job_id)
            outgoing = book.fail_all(WORKER_DIED)
            self._exit_code = ExitCode.HANDLER_DIED
        finally:
            sink.close()
            del self._calls[call.delivery.job_id]
            self._slot_freed.set()
        self._pump.put(outgoing, [call.delivery])

    async def _watch(self) -> None:
        """Cancel running calls whose deadline passed or whose client went away."""
        while True:
            await asyncio.sleep(WATCH_S)
            now_ms = int(time.time() * 1000)
            calls = list(self._calls.values())
            for call in calls:
                if is_expired(call.delivery.job.deadline_unix_ms, now_ms):
                    self._abort(call, DEADLINE_PASSED_RUNNING)
            waited = [
                c
                for c in calls
                if c.aborted is None and now_ms - c.delivery.job.enqueued_unix_ms >= CANCEL_CHECK_AFTER_MS
            ]
            if not waited:
                continue
            try:
                flags = await self._source.cancelled([c.delivery for c in waited])
            except BrokerUnavailable:
                continue
            for call, flag in zip(waited, flags, strict=True):
                if flag:
                    self._abort(call, CANCELLED)

    @staticmethod
    def _abort(call: Call, reason: SluiceError) -> None:
        if call.aborted is None and not call.future.done():
            log.info("call cancelled", request_id=call.delivery.job_id, reason=reason.code.value)
            call.aborted = reason
            call.future.cancel()
