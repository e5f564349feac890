"""What every worker loop mode shares (plain batching in :mod:`.worker`, continuous batching in
:mod:`.continuous`, async handlers in :mod:`.async_loop`): reading jobs through the
:class:`~.broker.source.JobSource` with backoff, the claim scan, screening out jobs whose client gave
up, and sending replies and acks now while confirming them later.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from sluice.errors import ErrorCode, SluiceError
from sluice.lifecycle.backoff import Backoff
from sluice.log import get_logger

from sluice_worker.batch_policy import Batching, is_expired
from sluice_worker.broker.retries import until_done
from sluice_worker.broker.source import BrokerUnavailable, JobSource
from sluice_worker.delivery import Delivery
from sluice_worker.protocols import Protocols, TsRequest
from sluice_worker.replies import Outgoing, failure

log = get_logger(__name__)

# Pause between polls of the job stream while a batch fills (see JobLoop._read).
FILL_POLL_S = 0.001
# Jobs younger than this are run without looking for a cancel flag first: their client is very
# likely still there, and the look costs a round trip on the hot path. (A job whose client did leave
# is run for nothing; its reply is dropped by the gateway.)
CANCEL_CHECK_AFTER_MS = 20
DEADLINE_PASSED = SluiceError(
    ErrorCode.DEADLINE_EXCEEDED, "Request deadline exceeded before the job started."
)
DEADLINE_PASSED_RUNNING = SluiceError(ErrorCode.DEADLINE_EXCEEDED, "Request deadline exceeded.")
CANCELLED = SluiceError(ErrorCode.CANCELLED, "Request cancelled by the client.")
# An error around the handler call (not inside the handler): answered like a handler exception.
PREDICTION_FAILED = SluiceError(ErrorCode.HANDLER_FAILED, "Prediction failed", http_status=503)


class JobLoop:
    def __init__(
        self,
        *,
        batching: Batching,
        response_timeout_s: float,
        claim_scan_interval_s: float,
        source: JobSource,
        stopping: asyncio.Event,
        protocols: Protocols | None = None,
    ) -> None:
        self._batching = batching
        self._response_timeout_s = response_timeout_s
        self._claim_scan_interval_s = claim_scan_interval_s
        self._source = source
        # Set on SIGTERM: stop reading, finish the jobs in hand.
        self._stopping = stopping
        self._read_backoff = Backoff()
        # How each job's request becomes a handler row and each result a reply payload.
        self._protocols = protocols or Protocols()
        # Replies and acks sent but not yet confirmed (see _finish), with how to send them again.
        self._unconfirmed: list[tuple[Awaitable[None], Callable[[], Awaitable[None]]]] = []

    async def _read(self, count: int, block_ms: int, *, filling: bool) -> list[Delivery]:
        """Read new jobs. While a batch fills, poll instead of blocking: Redis checks blocked readers'
        timeouts on its 100 ms timer (hz 10), so ``BLOCK 5`` would return after ~100 ms and the batch
        would wait far past ``max_batch_delay``. (A new entry wakes a blocked reader at once; only the
        timeout is coarse, so the idle read keeps blocking.) ``block_ms`` 0 with ``filling``: one
        look, no pause."""
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
        if filling and not got and block_ms > 0:
            await asyncio.sleep(min(FILL_POLL_S, block_ms / 1000))
        return got

    async def _scan(self, held: Sequence[Delivery]) -> list[Delivery]:
        try:
            return await self._source.rescue({delivery.receipt for delivery in held})
        except BrokerUnavailable as exc:
            log.warning("claim scan failed, will retry", error=str(exc))
            return []

    def _handler_request(self, delivery: Delivery) -> TsRequest | SluiceError:
        try:
            return self._protocols.handler_request(delivery.job, delivery.payload)
        except SluiceError as error:
            return error

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

    async def _publish(self, outgoing: Sequence[Outgoing]) -> None:
        await until_done(lambda: self._source.publish(outgoing), "intermediate reply")


def request_ids(deliveries: Sequence[Delivery]) -> dict[str, object]:
    """Log fields naming the jobs of a handler call."""
    if len(deliveries) == 1:
        return {"request_id": deliveries[0].job_id}
    return {"request_ids": [d.job_id for d in deliveries]}
