"""The continuous-batching loop (``ContinuousWorker``) through the in-memory job source, with
TorchServe's real ``ts.service.Service`` around a small handler: iteration-level batching, slots,
streams of chunks, clients leaving, failures. The same loop runs against a real Redis, real worker
processes and a real generative model in tests/integration/worker/test_generative.py."""

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from sluice.envelope import Reply
from sluice.errors import ErrorCode
from sluice.registry.records import BatchPolicy
from sluice_worker.batch_policy import Batching
from sluice_worker.continuous import ContinuousWorker
from sluice_worker.exit_codes import ExitCode
from sluice_worker.torch_thread import TorchThread

from tests.support.eventually import eventually
from tests.unit.worker.cb_services import Countdown, ts_service
from tests.unit.worker.in_memory_source import InMemoryJobSource, job, prediction, serve_until, stream


@pytest.fixture
async def torch_thread() -> AsyncIterator[TorchThread]:
    thread = TorchThread()
    yield thread
    thread.close()


def make_worker(
    source: InMemoryJobSource,
    torch_thread: TorchThread,
    handler: Countdown,
    stopping: asyncio.Event,
    *,
    batch_size: int = 4,
    max_batch_delay_ms: int = 30,
) -> ContinuousWorker:
    return ContinuousWorker(
        batching=Batching(
            policy=BatchPolicy.FILL,
            batch_size=batch_size,
            max_batch_delay_ms=max_batch_delay_ms,
            max_block_ms=50,
        ),
        response_timeout_s=5.0,
        claim_scan_interval_s=60,
        source=source,
        torch_thread=torch_thread,
        service=ts_service(handler.handle, batch_size),
        stopping=stopping,
    )


def tokens(replies: list[Reply]) -> list[bytes]:
    return [prediction(reply) for reply in replies]


async def test_running_requests_share_each_iteration_and_stream_every_token(
    torch_thread: TorchThread,
) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(), asyncio.Event()
    long, short = job(b"4", job_id="long"), job(b"2", job_id="short")
    source.add(long, short)
    code = await serve_until(
        make_worker(source, torch_thread, handler, stopping), stopping, lambda: len(source.acked) == 2
    )
    assert code is ExitCode.OK
    # One handler call per iteration; a running request is presented again with empty data.
    assert handler.calls[0] == [("long", bytearray(b"4")), ("short", bytearray(b"2"))]
    assert handler.calls[1] == [("long", {}), ("short", {})]
    assert handler.calls[2:] == [[("long", {})], [("long", {})]]
    assert tokens(stream(source, "long")) == [b"1", b"2", b"3", b"4"]
    assert [(r.seq, r.final) for r in stream(source, "long")] == [
        (0, False),
        (1, False),
        (2, False),
        (3, True),
    ]
    assert tokens(stream(source, "short")) == [b"1", b"2"]
    assert stream(source, "short")[-1].final
    # Each iteration's answers and the acks of finished jobs left in one send.
    assert [f.batch_size for f in source.finished] == [2, 2, 1, 1]
    assert [d.job_id for d in source.finished[1].done] == ["short"]


async def test_a_request_arriving_mid_generation_joins_the_running_batch_and_finishes_first(
    torch_thread: TorchThread,
) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(), asyncio.Event()
    source.add(job(b"30", job_id="long"))
    worker = make_worker(source, torch_thread, handler, stopping)
    task = asyncio.create_task(serve_until(worker, stopping, lambda: len(source.acked) == 2))
    await eventually(lambda: len(handler.calls) >= 3, interval_s=0.001)
    source.add(job(b"2", job_id="late"))
    assert await task is ExitCode.OK
    joined = next(i for i, call in enumerate(handler.calls) if ("late", bytearray(b"2")) in call)
    assert joined >= 3
    assert handler.calls[joined] == [("long", {}), ("late", bytearray(b"2"))]
    assert handler.calls[joined + 1] == [("long", {}), ("late", {})]
    assert source.acked.index(source.finished[joined + 1].done[0].receipt) == 0  # "late" ended first
    assert tokens(stream(source, "long")) == [str(n).encode() for n in range(1, 31)]


async def test_new_requests_wait_for_a_free_slot(torch_thread: TorchThread) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(), asyncio.Event()
    source.add(job(b"3", job_id="a"), job(b"3", job_id="b"), job(b"1", job_id="c"))
    worker = make_worker(source, torch_thread, handler, stopping, batch_size=2)
    await serve_until(worker, stopping, lambda: len(source.acked) == 3)
    assert max(len(call) for call in handler.calls) == 2
    assert handler.calls[3] == [("c", bytearray(b"1"))]


async def test_a_client_that_goes_away_frees_its_slot_and_vanishes_from_the_handlers_view(
    torch_thread: TorchThread,
) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(), asyncio.Event()
    source.add(job(b"100000", job_id="gone", age_ms=100), job(b"100000", job_id="stays", age_ms=100))
    worker = make_worker(source, torch_thread, handler, stopping)
    task = asyncio.create_task(serve_until(worker, stopping, lambda: len(source.acked) == 1))
    await eventually(lambda: len(handler.calls) >= 5, interval_s=0.001)
    source.cancelled_jobs.add("gone")
    await asyncio.sleep(0.1)
    source.cancelled_jobs.add("stays")
    assert await task is ExitCode.OK
    gone_reply = [r for r in stream(source, "gone") if r.final]
    assert gone_reply[0].error_code == ErrorCode.CANCELLED.value
    last_seen = max(i for i, call in enumerate(handler.calls) if any(rid == "gone" for rid, _ in call))
    assert handler.calls[last_seen + 1] == [("stays", {})]
    assert "gone" not in handler.wanted
    # The cancel reply continues the stream's numbering.
    assert gone_reply[0].seq == len(stream(source, "gone")) - 1


async def test_a_request_whose_deadline_passes_leaves_the_loop(torch_thread: TorchThread) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(), asyncio.Event()
    source.add(job(b"100000", job_id="late", deadline_ms=int(time.time() * 1000) + 200))
    worker = make_worker(source, torch_thread, handler, stopping)
    await serve_until(worker, stopping, lambda: len(source.acked) == 1)
    [final] = [r for r in stream(source, "late") if r.final]
    assert final.error_code == ErrorCode.DEADLINE_EXCEEDED.value
    assert len(handler.calls) > 1


async def test_a_failed_call_fails_every_running_request(torch_thread: TorchThread) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(fail_on_call=3), asyncio.Event()
    source.add(job(b"10", job_id="a"), job(b"10", job_id="b"))
    worker = make_worker(source, torch_thread, handler, stopping)
    await serve_until(worker, stopping, lambda: len(source.acked) == 2)
    for job_id in ("a", "b"):
        replies = stream(source, job_id)
        assert tokens(replies[:2]) == [b"1", b"2"]
        assert replies[2].final
        assert replies[2].error_code == ErrorCode.HANDLER_FAILED.value
        assert replies[2].status_code == 503


async def test_a_client_that_takes_one_answer_gets_the_tokens_joined(torch_thread: TorchThread) -> None:
    source, handler, stopping = InMemoryJobSource(), Countdown(), asyncio.Event()
    unary = job(b"5", job_id="unary")
    unary.final_only = True
    source.add(unary)
    await serve_until(
        make_worker(source, torch_thread, handler, stopping), stopping, lambda: len(source.acked) == 1
    )
    [reply] = stream(source, "unary")
    assert reply.final
    assert prediction(reply) == b"12345"
