"""``Worker.serve`` through the in-memory job source (no Redis): batches, skipped jobs, handler
failures, the response-timeout watchdog, broker outages and draining. The same loop runs against a
real Redis and real handlers in tests/integration/worker/."""

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sluice.errors import ErrorCode
from sluice.registry.records import BatchPolicy
from sluice_worker.batch_policy import Batching
from sluice_worker.exit_codes import ExitCode
from sluice_worker.torch_thread import TorchThread
from sluice_worker.worker import Worker

from tests.unit.worker.in_memory_source import Behaviour, FakeService, InMemoryJobSource, job, prediction

Run = Callable[..., Awaitable[ExitCode]]


@pytest.fixture
async def torch_thread() -> AsyncIterator[TorchThread]:
    thread = TorchThread()
    yield thread
    thread.close()


@pytest.fixture
def source() -> InMemoryJobSource:
    return InMemoryJobSource()


def worker(
    source: InMemoryJobSource,
    torch_thread: TorchThread,
    service: FakeService,
    stopping: asyncio.Event,
    *,
    batch_size: int = 4,
    policy: BatchPolicy = BatchPolicy.EAGER,
    response_timeout_s: float = 5.0,
) -> Worker:
    return Worker(
        batching=Batching(policy=policy, batch_size=batch_size, max_batch_delay_ms=50, max_block_ms=50),
        response_timeout_s=response_timeout_s,
        claim_scan_interval_s=60,
        source=source,
        torch_thread=torch_thread,
        service=service,
        stopping=stopping,
    )


async def serve_until(
    loop_worker: Worker, stopping: asyncio.Event, done: Callable[[], bool], timeout_s: float = 10.0
) -> ExitCode:
    """Serve until ``done()`` holds, then stop (SIGTERM) and return the exit code."""
    task = asyncio.create_task(loop_worker.serve())
    deadline = time.monotonic() + timeout_s
    while not done() and not task.done():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        await asyncio.sleep(0.01)
    stopping.set()
    return await asyncio.wait_for(task, timeout_s)


async def serve_acked(
    source: InMemoryJobSource, torch_thread: TorchThread, service: FakeService, acked: int, **options: Any
) -> ExitCode:
    """Serve until ``acked`` jobs were acknowledged, then stop."""
    stopping = asyncio.Event()
    loop_worker = worker(source, torch_thread, service, stopping, **options)
    return await serve_until(loop_worker, stopping, lambda: len(source.acked) == acked)


async def test_queued_jobs_run_as_one_batch_and_are_answered_and_acked(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service = FakeService()
    added = source.add(job(b"a"), job(b"b"), job(b"c"))
    code = await serve_acked(source, torch_thread, service, 3)
    assert code is ExitCode.OK
    assert service.batches == [[b"a", b"b", b"c"]]
    assert [prediction(source.reply_of(d.job_id)) for d in added] == [b"A", b"B", b"C"]
    assert source.finished[0].batch_size == 3
    assert set(source.acked) == {d.receipt for d in added}


async def test_a_batch_is_no_larger_than_the_batch_size(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service = FakeService()
    source.add(*(job(bytes([65 + i])) for i in range(5)))
    await serve_acked(source, torch_thread, service, 5, batch_size=2)
    assert [len(batch) for batch in service.batches] == [2, 2, 1]


async def test_expired_and_cancelled_jobs_are_answered_without_running(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service = FakeService()
    expired = job(b"late", deadline_ms=int(time.time() * 1000) - 1)
    cancelled = job(b"gone", age_ms=100)
    kept = job(b"kept", age_ms=100)
    source.cancelled_jobs.add(cancelled.job_id)
    source.add(expired, cancelled, kept)
    await serve_acked(source, torch_thread, service, 3)
    assert service.batches == [[b"kept"]]
    assert source.reply_of(expired.job_id).error_code == ErrorCode.DEADLINE_EXCEEDED.value
    assert source.reply_of(cancelled.job_id).error_code == ErrorCode.CANCELLED.value
    assert prediction(source.reply_of(kept.job_id)) == b"KEPT"


async def test_a_request_the_client_got_wrong_fails_alone(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service = FakeService()
    bad, good = job(b"x"), job(b"y")
    bad.request = b"\xff\xff\xff"
    source.add(bad, good)
    await serve_acked(source, torch_thread, service, 2)
    assert source.reply_of(bad.job_id).error_code == ErrorCode.INVALID_ARGUMENT.value
    assert prediction(source.reply_of(good.job_id)) == b"Y"


def sleeping(rows: list[bytes], service: Any) -> list[Any]:
    time.sleep(2)
    return list(rows)


def raising(rows: list[bytes], service: Any) -> list[Any]:
    raise RuntimeError("boom")


async def test_a_handler_error_fails_the_batch_and_the_worker_goes_on(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    behaviours: list[Behaviour] = [raising, lambda rows, service: rows]
    service, stopping = FakeService(lambda rows, svc: behaviours.pop(0)(rows, svc)), asyncio.Event()
    first = source.add(job(b"a"))[0]
    loop_worker = worker(source, torch_thread, service, stopping)
    task = asyncio.create_task(loop_worker.serve())
    await _until(lambda: len(source.acked) == 1)
    second = source.add(job(b"b"))[0]
    await _until(lambda: len(source.acked) == 2)
    stopping.set()
    assert await task is ExitCode.OK
    failed = source.reply_of(first.job_id)
    assert (failed.error_code, failed.status_code) == (ErrorCode.HANDLER_FAILED.value, 503)
    assert prediction(source.reply_of(second.job_id)) == b"b"


async def test_a_handler_past_its_response_timeout_fails_the_batch_and_ends_the_worker(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service, stopping = FakeService(sleeping), asyncio.Event()
    [stuck] = source.add(job(b"a"))
    loop_worker = worker(source, torch_thread, service, stopping, response_timeout_s=0.2)
    code = await asyncio.wait_for(loop_worker.serve(), 10)
    assert code is ExitCode.HANDLER_DIED
    assert source.reply_of(stuck.job_id).error_code == ErrorCode.WORKER_DIED.value
    assert source.acked == [stuck.receipt]


async def test_a_handler_calling_sys_exit_ends_the_worker(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service, stopping = FakeService(lambda rows, svc: sys.exit(1)), asyncio.Event()
    [exiting] = source.add(job(b"a"))
    code = await asyncio.wait_for(worker(source, torch_thread, service, stopping).serve(), 10)
    assert code is ExitCode.HANDLER_DIED
    assert source.reply_of(exiting.job_id).error_code == ErrorCode.WORKER_DIED.value


async def test_intermediate_results_are_published_before_the_final_one(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    def streaming(rows: list[bytes], service: Any) -> list[Any]:
        service.intermediate([b"part"])
        return [b"end"]

    service = FakeService(streaming)
    [streamed] = source.add(job(b"a"))
    await serve_acked(source, torch_thread, service, 1)
    assert [prediction(item.reply) for item in source.published] == [b"part"]
    assert not source.published[0].reply.final
    assert prediction(source.reply_of(streamed.job_id)) == b"end"


async def test_broker_outages_are_waited_out(source: InMemoryJobSource, torch_thread: TorchThread) -> None:
    service = FakeService()
    source.failing_reads = 2
    source.failing_finishes = 1
    [waited] = source.add(job(b"a"))
    await serve_acked(source, torch_thread, service, 1)
    assert source.reads >= 3
    assert prediction(source.reply_of(waited.job_id)) == b"A"
    assert service.batches == [[b"a"]], "a lost acknowledgement is sent again, the job is not run again"


async def test_jobs_of_dead_workers_are_taken_over(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    service = FakeService()
    [orphan] = source.add(job(b"orphan"))
    source.rescued = [source.waiting.popleft()]
    await serve_acked(source, torch_thread, service, 1)
    assert prediction(source.reply_of(orphan.job_id)) == b"ORPHAN"


async def test_stopping_finishes_the_jobs_in_hand_and_reads_no_more(
    source: InMemoryJobSource, torch_thread: TorchThread
) -> None:
    started = asyncio.Event()

    def slow(rows: list[bytes], service: Any) -> list[Any]:
        started.set()
        time.sleep(0.3)
        return rows

    service, stopping = FakeService(slow), asyncio.Event()
    [in_hand] = source.add(job(b"a"))
    task = asyncio.create_task(worker(source, torch_thread, service, stopping).serve())
    await asyncio.wait_for(started.wait(), 5)
    stopping.set()
    source.add(job(b"later"))
    assert await asyncio.wait_for(task, 5) is ExitCode.OK
    assert source.acked == [in_hand.receipt]
    assert service.batches == [[b"a"]]


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
