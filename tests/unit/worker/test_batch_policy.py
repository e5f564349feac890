"""The batch policy, exhaustively over small sizes."""

import itertools

import pytest
from sluice.envelope import Job
from sluice.registry.records import BatchPolicy
from sluice_worker.batch_policy import RUN, Batching, Read, is_expired, next_step, split_batches
from sluice_worker.delivery import Delivery

MAX_BLOCK_MS = 1000


def _cfg(policy: BatchPolicy, batch_size: int, delay_ms: int = 100) -> Batching:
    return Batching(
        policy=policy, batch_size=batch_size, max_batch_delay_ms=delay_ms, max_block_ms=MAX_BLOCK_MS
    )


@pytest.mark.parametrize("policy", list(BatchPolicy))
@pytest.mark.parametrize("batch_size", [1, 2, 8])
def test_nothing_in_hand_blocks_for_a_whole_batch(policy: BatchPolicy, batch_size: int) -> None:
    step = next_step(_cfg(policy, batch_size), batchable=0, streaming=0, waited_ms=0)
    assert step == Read(count=batch_size, block_ms=MAX_BLOCK_MS)


def test_fill_waits_for_the_rest_of_the_delay_then_runs() -> None:
    cfg = _cfg(BatchPolicy.FILL, batch_size=4, delay_ms=100)
    assert next_step(cfg, batchable=1, streaming=0, waited_ms=0) == Read(count=3, block_ms=100)
    assert next_step(cfg, batchable=3, streaming=0, waited_ms=30.2) == Read(count=1, block_ms=70)
    assert next_step(cfg, batchable=3, streaming=0, waited_ms=99.9) == Read(count=1, block_ms=1)
    assert next_step(cfg, batchable=3, streaming=0, waited_ms=100) is RUN
    assert next_step(cfg, batchable=4, streaming=0, waited_ms=0) is RUN


def test_long_fill_delays_are_waited_out_in_reads_of_at_most_max_block_ms() -> None:
    cfg = _cfg(BatchPolicy.FILL, batch_size=4, delay_ms=5000)
    assert next_step(cfg, batchable=1, streaming=0, waited_ms=0) == Read(count=3, block_ms=MAX_BLOCK_MS)
    assert next_step(cfg, batchable=1, streaming=0, waited_ms=4500) == Read(count=3, block_ms=500)


GRID = itertools.product(
    list(BatchPolicy),
    [1, 2, 3, 5],
    [0, 1, 50, 3000],
    range(7),
    range(3),
    [0.0, 0.5, 49.0, 50.0, 80.0, 1500.0, 2999.5, 3000.0],
    [False, True],
)


def test_policy_invariants_over_the_grid() -> None:
    for policy, batch_size, delay_ms, batchable, streaming, waited_ms, stopping in GRID:
        case = (policy, batch_size, delay_ms, batchable, streaming, waited_ms, stopping)
        cfg = _cfg(policy, batch_size, delay_ms)
        step = next_step(
            cfg, batchable=batchable, streaming=streaming, waited_ms=waited_ms, stopping=stopping
        )
        if batchable + streaming == 0:
            assert step == Read(count=batch_size, block_ms=MAX_BLOCK_MS), case
            continue
        must_run = (
            stopping
            or batchable == 0  # only streaming jobs: they run alone anyway, no reason to wait
            or batchable >= batch_size
            or policy is BatchPolicy.EAGER  # eager never waits once it holds a job
            or waited_ms >= delay_ms
        )
        if must_run:
            assert step is RUN, case
            continue
        assert isinstance(step, Read), case
        assert step.count == batch_size - batchable, case  # never reads past a full batch
        assert 1 <= step.block_ms <= min(delay_ms, MAX_BLOCK_MS), case  # BLOCK 0 would wait forever
        assert step.block_ms >= min(delay_ms - waited_ms, MAX_BLOCK_MS), case


def _delivery(name: str, streaming: bool = False) -> Delivery:
    return Delivery(receipt=name.encode(), job=Job(job_id=name, streaming=streaming))


def _names(batches: list[list[Delivery]]) -> list[list[str]]:
    return [[d.job_id for d in batch] for batch in batches]


def test_split_keeps_streaming_jobs_alone_and_batches_the_rest() -> None:
    held = [_delivery("a"), _delivery("s1", True), _delivery("b"), _delivery("c"), _delivery("s2", True)]
    assert _names(split_batches(held, batch_size=8)) == [["a", "b", "c"], ["s1"], ["s2"]]


def test_split_caps_batches_at_batch_size() -> None:
    held = [_delivery(str(i)) for i in range(5)]
    assert _names(split_batches(held, batch_size=2)) == [["0", "1"], ["2", "3"], ["4"]]
    assert split_batches([], batch_size=3) == []


def test_split_invariants() -> None:
    for batch_size, pattern in itertools.product([1, 2, 3], itertools.product([False, True], repeat=5)):
        held = [_delivery(str(i), streaming) for i, streaming in enumerate(pattern)]
        batches = split_batches(held, batch_size)
        flat = [d for batch in batches for d in batch]
        assert sorted(d.job_id for d in flat) == [d.job_id for d in held]  # every job exactly once
        for batch in batches:
            assert 1 <= len(batch) <= batch_size or (len(batch) == 1 and batch[0].job.streaming)
            if any(d.job.streaming for d in batch):
                assert len(batch) == 1
        # Arrival order is kept within the non-streaming jobs.
        plain = [d.job_id for d in flat if not d.job.streaming]
        assert plain == [d.job_id for d in held if not d.job.streaming]


@pytest.mark.parametrize(
    ("deadline_ms", "now_ms", "expired"),
    [(0, 10**13, False), (1000, 999, False), (1000, 1000, True), (1000, 1001, True)],
)
def test_deadline(deadline_ms: int, now_ms: int, expired: bool) -> None:
    assert is_expired(deadline_ms, now_ms) is expired
