"""How a continuous-batching worker fills its next iteration (TorchServe 0.12's ``ContinuousBatching``
with ``Model.pollInferJob``): a pure function, no I/O, no clock.

While requests run, free slots (``batch_size`` - running) are filled from what is already queued,
without waiting: a running generation never pauses for a newcomer. With nothing running, the first
fill waits for a job, then up to ``max_batch_delay_ms`` for more (``eager``: not at all).
"""

import math

from sluice.registry.records import BatchPolicy

from sluice_worker.batch_policy import RUN, Batching, Read, Run


def next_fill(
    cfg: Batching, *, running: int, new: int, waited_ms: float, looked: bool, stopping: bool = False
) -> Read | Run:
    """What to do before the next iteration with ``running`` requests in the iteration loop and
    ``new`` jobs read for it, ``waited_ms`` after the first of them arrived; ``looked``: the queue
    was already looked at for this iteration. ``Read.block_ms`` 0 means one look without waiting."""
    free = cfg.batch_size - running - new
    if stopping or free <= 0:
        return RUN
    if running:
        return RUN if looked else Read(count=free, block_ms=0)
    if not new:
        return Read(count=free, block_ms=cfg.max_block_ms)
    if cfg.policy is BatchPolicy.EAGER:
        return RUN
    remaining_ms = cfg.max_batch_delay_ms - waited_ms
    if remaining_ms <= 0:
        return RUN
    return Read(count=free, block_ms=max(1, min(cfg.max_block_ms, math.ceil(remaining_ms))))
