"""The async-handler loop (``AsyncWorker``) through the in-memory job source, with TorchServe's real
``ts.service.Service`` around an ``async def`` handler: concurrent calls, intermediates in order, the
cap, clients leaving, the response timeout."""

import asyncio
from collections.abc import Iterator

import pytest
from sluice.errors import ErrorCode
from sluice.registry.records import BatchPolicy
from sluice_worker.async_loop import AsyncWorker
from sluice_worker.batch_policy import Batching
from sluice_worker.exit_codes import ExitCode
from sluice_worker.handler_loop import HandlerLoop

from tests.support.eventually import eventually
from tests.unit.worker.cb_services import async_countdown, ts_service
from tests.unit.worker.in_memory_source import InMemoryJobSource, job, prediction, serve_until, stream


@pytest.fixture
def handler_loop() -> Iterator[HandlerLoop]:
    loop = HandlerLoop()
    yield loop
    loop.close()


def make_worker(
    source: InMemoryJobSource,
    handler_loop: HandlerLoop,
    stopping: asyncio.Event,
    *,
    slots: int = 8,
    response_timeout_s: float = 5.0,
) -> AsyncWorker:
    return AsyncWorker(
        batching=Batching(policy=BatchPolicy.FILL, batch_size=1, max_batch_delay_ms=0, max_block_ms=50),
        response_timeout_s=response_timeout_s,
        claim_scan_interval_s=60,
        source=source,
        handler_loop=handler_loop,
        service=ts_service(async_countdown, 1),
        stopping=stopping,
        slots=slots,
    )


async def test_concurrent_calls_stream_their_tokens_in_order(handler_loop: HandlerLoop) -> None:
    source, stopping = InMemoryJobSource(), asyncio.Event()
    source.add(*(job(str(n).encode(), job_id=f"j{n}") for n in range(1, 11)))
    worker = make_worker(source, handler_loop, stopping)
    assert await serve_until(worker, stopping, lambda: len(source.acked) == 10) is ExitCode.OK
    for n in range(1, 11):
        replies = stream(source, f"j{n}")
        assert [prediction(r) for r in replies] == [str(t).encode() for t in range(1, n + 1)]
        assert [r.seq for r in replies] == list(range(n))
        assert [r.final for r in replies] == [False] * (n - 1) + [True]


async def test_no_more_calls_run_than_the_slots(handler_loop: HandlerLoop) -> None:
    source, stopping = InMemoryJobSource(), asyncio.Event()
    source.add(*(job(b"hang", job_id=f"h{n}") for n in range(5)))
    worker = make_worker(source, handler_loop, stopping, slots=3)
    task = asyncio.create_task(worker.serve())
    await asyncio.sleep(0.2)
    assert worker.running == 3
    assert len(source.waiting) == 2
    for n in range(5):
        source.cancelled_jobs.add(f"h{n}")
    await eventually(lambda: len(source.acked) == 5)
    stopping.set()
    assert await asyncio.wait_for(task, 5) is ExitCode.OK


async def test_a_call_whose_client_left_is_cancelled_and_its_slot_freed(handler_loop: HandlerLoop) -> None:
    source, stopping = InMemoryJobSource(), asyncio.Event()
    source.add(job(b"hang", job_id="gone", age_ms=100))
    worker = make_worker(source, handler_loop, stopping, slots=1)
    task = asyncio.create_task(worker.serve())
    await asyncio.sleep(0.1)
    source.cancelled_jobs.add("gone")
    source.add(job(b"2", job_id="next"))
    await eventually(lambda: len(source.acked) == 2)
    stopping.set()
    await asyncio.wait_for(task, 5)
    assert stream(source, "gone")[-1].error_code == ErrorCode.CANCELLED.value
    assert [prediction(r) for r in stream(source, "next")] == [b"1", b"2"]


async def test_a_call_past_the_response_timeout_is_answered_and_the_worker_goes_on(
    handler_loop: HandlerLoop,
) -> None:
    source, stopping = InMemoryJobSource(), asyncio.Event()
    source.add(job(b"hang", job_id="slow"), job(b"3", job_id="fine"))
    worker = make_worker(source, handler_loop, stopping, response_timeout_s=0.3)
    assert await serve_until(worker, stopping, lambda: len(source.acked) == 2) is ExitCode.OK
    [slow] = stream(source, "slow")
    assert slow.error_code == ErrorCode.HANDLER_FAILED.value
    assert slow.status_code == 504
    assert prediction(stream(source, "fine")[-1]) == b"3"


async def test_a_client_that_takes_one_answer_gets_the_chunks_joined(handler_loop: HandlerLoop) -> None:
    source, stopping = InMemoryJobSource(), asyncio.Event()
    unary = job(b"4", job_id="unary")
    unary.final_only = True
    source.add(unary)
    await serve_until(make_worker(source, handler_loop, stopping), stopping, lambda: len(source.acked) == 1)
    [reply] = stream(source, "unary")
    assert prediction(reply) == b"1234"
