"""The data plane over an in-memory broker (its two seams) and a fake resolver: admission outcomes,
unary and streaming replies, duplicates, deadlines, cancel flags, redelivered streams, a lost reply
path."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError, no_worker_message
from sluice.registry.records import VersionRecord
from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.dataplane import DataPlane, InferenceCall
from sluice_gateway.inflight import PendingJob
from sluice_gateway.registry_cache import model_not_found

from tests.unit.gateway.fakes import record
from tests.unit.gateway.in_memory_broker import InMemoryBroker


class FakeResolver:
    def __init__(self, *records: VersionRecord) -> None:
        self.records = list(records)
        self.resolved = 0
        self.invalidated: list[str | None] = []

    async def resolve(
        self, model: str, requested: str, sequence: SequenceStep | None = None
    ) -> VersionRecord:
        self.resolved += 1
        for candidate in self.records:
            if candidate.model_name == model and requested in ("", candidate.version):
                return candidate
        raise model_not_found(model)

    def invalidate(self, model: str | None = None) -> None:
        self.invalidated.append(model)


class Observer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.done: list[PendingJob] = []
        # (job id, wait in ns, first chunk) per chunk streamed
        self.chunks: list[tuple[str, int, bool]] = []

    def admitted(self, model: str, requested_version: str) -> None:
        self.requests.append((model, requested_version))

    def streamed(self, job: PendingJob, wait_ns: int, first: bool) -> None:
        self.chunks.append((job.job_id, wait_ns, first))

    def finished(self, job: PendingJob) -> None:
        self.done.append(job)


class Setup:
    def __init__(self, **plane_options: Any) -> None:
        self.broker = InMemoryBroker()
        self.admission = self.broker.admission
        self.replies = self.broker.replies
        self.version = self.admission.add_version("echo", "1.0")
        self.resolver = FakeResolver(record(response_timeout_s=30))
        self.observer = Observer()
        self.plane = DataPlane(
            self.resolver, self.admission, self.replies, clock_ms=lambda: 1_000_000, observer=self.observer,
            **plane_options,
        )  # fmt: skip

    async def next_job(self) -> Job:
        return await self.admission.take()

    @property
    def waiting(self) -> int:
        return self.replies.waiters.in_flight


def call(model: str = "echo", version: str = "", timeout_s: float | None = None) -> InferenceCall:
    return InferenceCall(WireProtocol.TORCHSERVE_GRPC, model, version, b"request", timeout_s=timeout_s)


async def answered(setup: Setup, start: Callable[[], Any], **reply: Any) -> Any:
    task = asyncio.ensure_future(start())
    setup.replies.send((await setup.next_job()).job_id, **reply)
    return await task


async def refused(setup: Setup, start: Callable[[], Any]) -> SluiceError:
    """The error of a call the broker did not take: it leaves no waiter and no cancel flag."""
    waiting, flags = setup.waiting, len(setup.admission.cancelled)
    with pytest.raises(SluiceError) as caught:
        await start()
    assert (setup.waiting, len(setup.admission.cancelled)) == (waiting, flags)
    return caught.value


# Admission ---------------------------------------------------------------------------------------
async def test_infer_returns_the_final_reply_and_leaves_nothing_behind() -> None:
    setup = Setup()
    task = asyncio.ensure_future(setup.plane.infer(call()))
    job = await setup.next_job()
    assert (job.model_name, job.model_version, job.request) == ("echo", "1.0", b"request")
    assert job.reply_to == "memory:replies"
    assert job.deadline_unix_ms - job.enqueued_unix_ms == 30_000  # the version's response timeout
    setup.replies.send(job.job_id, final=True, payload=b"out")
    assert (await task).payload == b"out"
    assert setup.waiting == 0
    assert setup.admission.cancelled == []
    assert setup.observer.requests == [("echo", "")]
    assert [(j.job_id, j.succeeded) for j in setup.observer.done] == [(job.job_id, True)]


async def test_a_version_without_workers_is_refused() -> None:
    setup = Setup()
    setup.version.workers = 0
    error = await refused(setup, lambda: setup.plane.infer(call()))
    assert (error.code, error.message) == (ErrorCode.NO_WORKER, no_worker_message("echo"))
    assert setup.observer.requests == [("echo", "")]  # a request for a model that exists


async def test_a_version_that_scales_from_zero_takes_the_job_and_marks_it_cold() -> None:
    setup = Setup()
    setup.version.workers = 0
    setup.version.scales_from_zero = True
    reply = await answered(setup, lambda: setup.plane.infer(call()), final=True, payload=b"out")
    assert reply.payload == b"out"
    assert [(j.succeeded, j.cold) for j in setup.observer.done] == [(True, True)]


async def test_a_full_queue_is_refused() -> None:
    setup = Setup()
    setup.version.queue_size = 1
    first = asyncio.ensure_future(setup.plane.infer(call()))
    await asyncio.sleep(0)
    error = await refused(setup, lambda: setup.plane.infer(call(version="1.0")))
    assert (error.code, error.message) == (ErrorCode.QUEUE_FULL, no_worker_message("echo"))
    assert setup.observer.requests == [("echo", ""), ("echo", "1.0")]
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_broker_that_cannot_be_reached_is_unavailable() -> None:
    setup = Setup()
    setup.admission.down = True
    error = await refused(setup, lambda: setup.plane.infer(call()))
    assert (error.code, error.message) == (
        ErrorCode.UNAVAILABLE,
        "Service unavailable: the job queue is unreachable.",
    )


async def test_names_are_checked_before_the_registry() -> None:
    setup = Setup()
    for bad in [call(model="a{b}"), call(version="1:0"), call(model="")]:
        with pytest.raises(SluiceError):
            await setup.plane.infer(bad)
    assert setup.resolver.resolved == 0
    assert setup.admission.jobs() == []


async def test_stale_registry_is_reloaded_once() -> None:
    setup = Setup()
    setup.admission.gone_next = 1
    reply = await answered(setup, lambda: setup.plane.infer(call()), final=True)
    assert reply.final
    assert setup.resolver.invalidated == ["echo"]
    assert setup.resolver.resolved == 2


async def test_a_version_gone_twice_is_not_found() -> None:
    setup = Setup()
    setup.admission.gone_next = 2
    error = await refused(setup, lambda: setup.plane.infer(call(version="1.0")))
    assert (error.code, error.message) == (
        ErrorCode.VERSION_NOT_FOUND,
        "Model version: 1.0 does not exist for model: echo",
    )
    setup.admission.gone_next = 2
    assert (await refused(setup, lambda: setup.plane.infer(call()))).code is ErrorCode.MODEL_NOT_FOUND
    assert setup.observer.requests == []


async def test_a_call_cancelled_during_the_enqueue_flags_its_job() -> None:
    setup = Setup()
    setup.admission.gate = asyncio.Event()
    task = asyncio.ensure_future(setup.plane.infer(call()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(setup.admission.cancelled) == 1
    assert setup.waiting == 0


# Replies -----------------------------------------------------------------------------------------
async def test_failure_reply_raises_the_domain_error() -> None:
    setup = Setup()
    with pytest.raises(SluiceError) as caught:
        await answered(
            setup, lambda: setup.plane.infer(call()), final=True, error_code="HANDLER_FAILED", status_code=400
        )
    assert (caught.value.code, caught.value.http_status) == (ErrorCode.HANDLER_FAILED, 400)
    assert setup.admission.cancelled == []


async def test_duplicates_and_strangers_are_dropped() -> None:
    setup = Setup()
    task = asyncio.ensure_future(setup.plane.infer(call()))
    job_id = (await setup.next_job()).job_id
    setup.replies.send("someone-else", final=True, payload=b"not mine")
    setup.replies.send(job_id, final=False, payload=b"partial")
    setup.replies.send(job_id, final=True, payload=b"first")
    setup.replies.send(job_id, final=True, payload=b"duplicate")
    assert (await task).payload == b"first"
    setup.replies.send(job_id, final=True, payload=b"late")  # nobody waits any more
    assert setup.waiting == 0


async def collect(setup: Setup, replies: list[dict[str, Any]]) -> list[bytes]:
    received: list[bytes] = []

    async def consume() -> None:
        async for reply in setup.plane.infer_stream(call()):
            received.append(reply.payload)

    task = asyncio.ensure_future(consume())
    job = await setup.next_job()
    assert job.streaming
    for fields in replies:
        setup.replies.send(job.job_id, **fields)
    await task
    return received


async def test_stream_yields_in_order_and_drops_repeats_and_stale_attempts() -> None:
    setup = Setup()
    received = await collect(
        setup,
        [
            {"seq": 0, "attempt": 2, "payload": b"a"},
            {"seq": 0, "attempt": 2, "payload": b"a-again"},
            {"seq": 5, "attempt": 1, "payload": b"zombie"},
            {"seq": 1, "attempt": 2, "payload": b"b"},
            {"seq": 2, "attempt": 2, "payload": b"end", "final": True},
        ],
    )
    assert received == [b"a", b"b", b"end"]
    assert setup.admission.cancelled == []
    assert setup.waiting == 0


async def test_a_redelivered_attempt_before_any_chunk_was_forwarded_is_taken() -> None:
    setup = Setup()
    received = await collect(
        setup,
        [
            {"seq": 0, "attempt": 2, "payload": b"a"},
            {"seq": 1, "attempt": 2, "payload": b"end", "final": True},
        ],
    )
    assert received == [b"a", b"end"]


async def test_stream_fails_when_a_new_attempt_follows_forwarded_chunks() -> None:
    setup = Setup()
    with pytest.raises(SluiceError) as caught:
        await collect(setup, [{"seq": 0, "attempt": 1}, {"seq": 0, "attempt": 2}])
    assert (caught.value.code, caught.value.message) == (ErrorCode.UNAVAILABLE, "worker lost mid-stream")
    assert len(setup.admission.cancelled) == 1  # the second attempt is still running


async def test_a_failure_from_a_later_attempt_is_reported_as_such() -> None:
    setup = Setup()
    with pytest.raises(SluiceError) as caught:
        await collect(
            setup,
            [
                {"seq": 0, "attempt": 1, "payload": b"chunk"},
                {
                    "attempt": 3,
                    "final": True,
                    "error_code": "WORKER_DIED",
                    "status_code": 500,
                    "message": "Worker died.",
                },
            ],
        )
    assert (caught.value.code, caught.value.message) == (ErrorCode.WORKER_DIED, "Worker died.")
    assert setup.admission.cancelled == []


async def test_only_unary_calls_ask_for_the_final_reply_alone() -> None:
    setup = Setup()
    unary = asyncio.ensure_future(setup.plane.infer(call()))
    assert (await setup.next_job()).final_only
    stream = await setup.plane.submit_stream(call())
    assert not (await setup.next_job()).final_only
    batchable = InferenceCall(WireProtocol.TORCHSERVE_REST, "echo", "", b"r", stream_in_batch=True)
    in_batch = await setup.plane.submit_stream(batchable)
    assert not (await setup.next_job()).final_only
    unary.cancel()
    with pytest.raises(asyncio.CancelledError):
        await unary
    stream.close()
    in_batch.close()


def many_chunks(count: int) -> list[dict[str, Any]]:
    """``count`` intermediate replies, then the final one (``seq`` count)."""
    chunks: list[dict[str, Any]] = [{"seq": n, "payload": f"tok{n}".encode()} for n in range(count)]
    return [*chunks, {"seq": count, "payload": b"end", "final": True}]


async def test_a_long_stream_is_relayed_completely_and_in_order() -> None:
    setup = Setup()
    received = await collect(setup, many_chunks(50))
    assert received == [f"tok{n}".encode() for n in range(50)] + [b"end"]
    assert setup.waiting == 0
    assert setup.admission.cancelled == []


async def test_a_unary_call_gets_exactly_the_final_reply_of_a_long_stream() -> None:
    setup = Setup()
    task = asyncio.ensure_future(setup.plane.infer(call()))
    job = await setup.next_job()
    for fields in many_chunks(50):
        setup.replies.send(job.job_id, **fields)
    assert (await task).payload == b"end"
    assert setup.observer.chunks == []  # unary calls are not timed chunk by chunk


async def test_every_chunk_of_a_streamed_call_is_timed() -> None:
    setup = Setup()
    await collect(setup, many_chunks(3))
    assert [first for _job, _wait, first in setup.observer.chunks] == [True, False, False, False]
    assert all(wait_ns >= 0 for _job, wait_ns, _first in setup.observer.chunks)


async def test_chunks_without_payload_and_single_answers_are_not_timed() -> None:
    setup = Setup()
    await collect(setup, [{"seq": 0}, {"seq": 1, "payload": b"a"}, {"seq": 2, "final": True}])
    assert [first for _job, _wait, first in setup.observer.chunks] == [True]
    setup.observer.chunks.clear()
    await collect(setup, [{"seq": 0, "payload": b"whole answer", "final": True}])
    assert setup.observer.chunks == []  # answered at once: it did not stream


async def test_stream_in_batch_jobs_are_not_flagged_streaming() -> None:
    setup = Setup()
    batchable = InferenceCall(WireProtocol.TORCHSERVE_REST, "echo", "", b"r", stream_in_batch=True)
    job = await setup.plane.submit_stream(batchable)
    assert not (await setup.next_job()).streaming
    job.close()


# Deadlines and cancel flags ----------------------------------------------------------------------
async def test_deadline_raises_and_flags_the_job() -> None:
    setup = Setup(cancel_margin_s=60)
    with pytest.raises(SluiceError) as caught:
        await setup.plane.infer(call(timeout_s=0.01))
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.DEADLINE_EXCEEDED,
        "Timed out waiting for the model's response.",
    )
    (flag,) = setup.admission.cancelled
    job = setup.admission.jobs()[0]
    assert (flag.model, flag.version, flag.job_id) == ("echo", "1.0", job.job_id)
    assert flag.ttl_ms == 60_000 + 10
    assert setup.waiting == 0


async def test_a_stream_deadline_fails_the_stream() -> None:
    setup = Setup()
    with pytest.raises(SluiceError) as caught:
        async for _ in setup.plane.infer_stream(call(timeout_s=0.01)):
            pass
    assert caught.value.code is ErrorCode.DEADLINE_EXCEEDED
    assert len(setup.admission.cancelled) == 1


async def test_cancelled_call_flags_the_job() -> None:
    setup = Setup()
    task = asyncio.ensure_future(setup.plane.infer(call()))
    job = await setup.next_job()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [flag.job_id for flag in setup.admission.cancelled] == [job.job_id]
    assert setup.waiting == 0


async def test_closing_a_job_flags_it_once_unless_it_finished() -> None:
    setup = Setup()
    job = await setup.plane.submit_stream(
        InferenceCall(WireProtocol.TORCHSERVE_GRPC, "echo", "", b"r", headers={"ts_request_sequence_id": "s"})
    )
    sent = await setup.next_job()
    assert sent.streaming
    assert dict(sent.headers) == {"ts_request_sequence_id": "s"}
    job.close()
    job.close()
    assert len(setup.admission.cancelled) == 1
    finished = await setup.plane.submit(call())
    setup.replies.send((await setup.next_job()).job_id, final=True)
    await finished.result()
    finished.close()
    assert len(setup.admission.cancelled) == 1


# The reply path ----------------------------------------------------------------------------------
async def test_a_lost_reply_path_fails_every_waiting_call() -> None:
    setup = Setup()
    unary = asyncio.ensure_future(setup.plane.infer(call()))
    await setup.next_job()
    stream = asyncio.ensure_future(setup.plane.infer_stream(call()).__anext__())
    await setup.next_job()
    lost = SluiceError(ErrorCode.UNAVAILABLE, "reply stream lost")
    assert setup.replies.lose(lost) == 2
    for task in (unary, stream):
        with pytest.raises(SluiceError) as caught:
            await task
        assert caught.value is lost
    assert len(setup.admission.cancelled) == 2  # their jobs may still run: workers skip them
    assert setup.waiting == 0


# Sequences (stateful models) ---------------------------------------------------------------------
STATEFUL = {"sequence_batching": True, "sequence_max_idle_ms": 1000}


def stateful_setup(**fields: Any) -> Setup:
    setup = Setup()
    setup.resolver.records = [record(response_timeout_s=30, **{**STATEFUL, **fields})]
    return setup


async def test_a_stateful_call_that_names_no_sequence_starts_one_when_the_transport_asks() -> None:
    setup = stateful_setup()
    rest = InferenceCall(WireProtocol.TORCHSERVE_REST, "echo", "", b"r", missing_sequence=None)
    job = await setup.plane.submit_stream(rest)
    sent = await setup.next_job()
    assert job.sequence_id.startswith("ts-seq-")
    assert len(job.sequence_id) == len("ts-seq-") + 36
    assert (sent.sequence_id, sent.sequence_start, sent.sequence_end) == (job.sequence_id, True, False)
    assert dict(sent.headers) == {
        "ts_request_sequence_id": job.sequence_id,
        "ts_request_sequence_start": "true",
    }
    job.close()


async def test_a_stateful_call_that_names_no_sequence_is_refused_with_the_transports_text() -> None:
    setup = stateful_setup()
    kserve = InferenceCall(WireProtocol.KSERVE, "echo", "", b"r", missing_sequence="name a sequence")
    error = await refused(setup, lambda: setup.plane.submit(kserve))
    assert (error.code, error.message) == (ErrorCode.INVALID_ARGUMENT, "name a sequence")
    assert setup.admission.jobs() == []


async def test_only_a_stateful_models_job_names_its_sequence_to_the_transport() -> None:
    """A model that is not stateful routes as before: the handler still sees the sequence headers."""
    setup = Setup()
    step = SequenceStep("s1", start=True)
    job = await setup.plane.submit_stream(
        InferenceCall(WireProtocol.TORCHSERVE_REST, "echo", "", b"r", sequence=step, missing_sequence=None)
    )
    sent = await setup.next_job()
    assert job.sequence_id == ""
    assert dict(sent.headers) == {"ts_request_sequence_id": "s1", "ts_request_sequence_start": "true"}
    job.close()
