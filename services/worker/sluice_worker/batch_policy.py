"""How the worker forms batches: pure functions, no I/O, no clock.

``fill`` is TorchServe's rule: after the first job, keep reading until ``batch_size`` jobs are in hand
or ``max_batch_delay_ms`` has passed since the first one arrived. ``eager`` runs whatever one read
returned: it never waits on an idle queue, and under load each read returns a full batch anyway.
A streaming job always runs alone.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sluice.registry.records import BatchPolicy

from sluice_worker.delivery import Delivery


@dataclass(frozen=True)
class Read:
    """Read up to ``count`` more jobs, blocking at most ``block_ms`` (always >= 1: BLOCK 0 is forever)."""

    count: int
    block_ms: int


@dataclass(frozen=True)
class Run:
    """Run the jobs in hand now."""


RUN = Run()


@dataclass(frozen=True)
class Batching:
    policy: BatchPolicy
    batch_size: int
    max_batch_delay_ms: int
    # BLOCK of a read while nothing is in hand, and the longest any read blocks: the blocking
    # connection's socket timeout is sized from it, and the loop must come back to notice SIGTERM.
    max_block_ms: int


def next_step(
    cfg: Batching, *, batchable: int, streaming: int, waited_ms: float, stopping: bool = False
) -> Read | Run:
    """What to do with ``batchable`` (non-streaming) and ``streaming`` jobs in hand, ``waited_ms``
    after the first of them arrived."""
    if batchable == 0 and streaming == 0:
        return Read(count=cfg.batch_size, block_ms=cfg.max_block_ms)
    if stopping or batchable == 0 or batchable >= cfg.batch_size or cfg.policy is BatchPolicy.EAGER:
        return RUN
    remaining_ms = cfg.max_batch_delay_ms - waited_ms
    if remaining_ms <= 0:
        return RUN
    block_ms = min(cfg.max_block_ms, math.ceil(remaining_ms))
    return Read(count=cfg.batch_size - batchable, block_ms=max(1, block_ms))


def split_batches(deliveries: Sequence[Delivery], batch_size: int) -> list[list[Delivery]]:
    """Handler calls for the jobs in hand, in arrival order: non-streaming jobs together (at most
    ``batch_size`` per call), each streaming job alone."""
    batches: list[list[Delivery]] = []
    open_batch: list[Delivery] | None = None
    for delivery in deliveries:
        if delivery.job.streaming:
            batches.append([delivery])
            continue
        if open_batch is None or len(open_batch) >= batch_size:
            open_batch = []
            batches.append(open_batch)
        open_batch.append(delivery)
    return batches


def is_expired(deadline_unix_ms: int, now_unix_ms: int) -> bool:
    """A job whose client deadline has passed (0 = no deadline) is not worth running."""
    return 0 < deadline_unix_ms <= now_unix_ms
