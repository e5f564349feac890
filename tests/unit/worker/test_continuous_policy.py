"""The continuous-batching fill rule (TorchServe 0.12's ContinuousBatching / Model.pollInferJob)."""

import pytest
from sluice.registry.records import BatchPolicy
from sluice_worker.batch_policy import RUN, Batching, Read, Run
from sluice_worker.continuous_policy import next_fill

CFG = Batching(policy=BatchPolicy.FILL, batch_size=8, max_batch_delay_ms=50, max_block_ms=1000)


@pytest.mark.parametrize(
    ("running", "new", "waited_ms", "looked", "expected"),
    [
        # Idle: block for the first job.
        (0, 0, 0.0, False, Read(count=8, block_ms=1000)),
        # The first fill waits up to maxBatchDelay for more...
        (0, 2, 10.0, True, Read(count=6, block_ms=40)),
        (0, 2, 50.0, True, RUN),
        # ...unless it is full.
        (0, 8, 0.0, True, RUN),
        # While requests run: one look for up to the free slots, never a wait.
        (3, 0, 0.0, False, Read(count=5, block_ms=0)),
        (3, 1, 0.0, True, RUN),
        (3, 0, 0.0, True, RUN),
        # No free slot: run without looking.
        (8, 0, 0.0, False, RUN),
        (6, 2, 0.0, False, RUN),
    ],
)
def test_fill(running: int, new: int, waited_ms: float, looked: bool, expected: Read | Run) -> None:
    assert next_fill(CFG, running=running, new=new, waited_ms=waited_ms, looked=looked) == expected


def test_eager_runs_what_it_has() -> None:
    eager = Batching(policy=BatchPolicy.EAGER, batch_size=8, max_batch_delay_ms=50, max_block_ms=1000)
    assert next_fill(eager, running=0, new=1, waited_ms=0.0, looked=True) == RUN


def test_a_stopping_worker_reads_nothing_more() -> None:
    assert next_fill(CFG, running=2, new=0, waited_ms=0.0, looked=False, stopping=True) == RUN
