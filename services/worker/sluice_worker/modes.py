"""Which loop a version's worker runs (plain batching, continuous batching, async handlers) and where
its handler runs (inline on the loop's thread, or the torch thread), from the version's record."""

import asyncio
from collections.abc import Callable
from typing import Any

from sluice.registry.records import VersionRecord

from sluice_worker import runtime
from sluice_worker.async_loop import AsyncWorker
from sluice_worker.batch_policy import Batching
from sluice_worker.broker.call_guard import CallGuard
from sluice_worker.broker.outbox import Command
from sluice_worker.broker.source import JobSource
from sluice_worker.continuous import ContinuousWorker
from sluice_worker.delivery import Delivery
from sluice_worker.handler_loop import HandlerLoop
from sluice_worker.inline_runner import InlineRunner
from sluice_worker.protocols import Protocols
from sluice_worker.replies import Outgoing
from sluice_worker.sequence_state import SequenceStates
from sluice_worker.settings import WorkerSettings
from sluice_worker.torch_thread import TorchThread
from sluice_worker.worker import Worker

# The worker loop of each scheduling mode (chosen from the version's record, see build_loop).
Loop = Worker | ContinuousWorker | AsyncWorker
# The commands that answer an inline call's jobs with the given replies and ack them (Worker's abandon).
Abandon = Callable[[list[Outgoing], list[Delivery]], list[Command]]


def runner_for(
    settings: WorkerSettings, record: VersionRecord, torch_thread: TorchThread
) -> TorchThread | InlineRunner:
    """Where the handler runs (see :mod:`.inline_runner`): inline on this loop's thread for plain
    batching of a stateless version (unless ``inline_handler`` is off), else on the torch thread.

    Inline, nothing overlaps a call: a heavy one loses what the torch thread overlaps with it (the
    next batch read and decoded, replies sent). Measured (bench-worker-loop): the MLP gains at C=1 and
    at C=16; the CNN with batch 8 at C=16 is within a few percent either way."""
    plain = not (record.continuous_batching or record.async_communication or record.stateful)
    if not (plain and settings.inline_handler):
        return torch_thread
    return InlineRunner(CallGuard.connect(settings.redis_url, beat_every_s=settings.heartbeat_interval_s))


def nothing_to_abandon(outgoing: list[Outgoing], deliveries: list[Delivery]) -> list[Command]:
    """A warm-up's jobs are not in Redis: an abandoned warm-up call leaves nothing to answer."""
    return []


def build_loop(
    record: VersionRecord,
    settings: WorkerSettings,
    source: JobSource,
    runner: TorchThread | InlineRunner,
    service: runtime.HandlerService,
    handler_loop: HandlerLoop | None,
    stop: asyncio.Event,
    sequences: SequenceStates | None,
    abandon: Abandon,
) -> Loop:
    """The worker loop of the version's scheduling mode: continuous batching (with or without
    sequences), async handlers, or plain batching."""
    batching = Batching(
        policy=record.batch_policy,
        batch_size=max(1, record.batch_size),
        max_batch_delay_ms=record.max_batch_delay_ms,
        max_block_ms=settings.read_block_ms,
    )
    protocols = Protocols(record.tensors, decode_input_request=settings.decode_input_request)
    common: dict[str, Any] = {
        "batching": batching,
        "response_timeout_s": record.response_timeout_s,
        "claim_scan_interval_s": settings.claim_scan_interval_s,
        "source": source,
        "service": service,
        "stopping": stop,
        "protocols": protocols,
    }
    if isinstance(runner, InlineRunner):
        return Worker(torch_thread=runner, abandon=abandon, **common)
    if record.continuous_batching:
        return ContinuousWorker(torch_thread=runner, sequences=sequences, **common)
    if handler_loop is not None:
        return AsyncWorker(handler_loop=handler_loop, slots=record.slots_per_worker, **common)
    return Worker(torch_thread=runner, sequences=sequences, **common)
