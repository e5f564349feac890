"""The data plane with fake seams: admission, results, deadlines, cancel flags, stream attempts."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sluice.envelope import Reply, WireProtocol, decode_job
from sluice.errors import ErrorCode, SluiceError
from sluice.records import VersionRecord
from sluice_gateway.broker.redis_admission import VersionGone
from sluice_gateway.broker.redis_replies import ReplyBus
from sluice_gateway.dataplane import DataPlane, InferenceCall
from sluice_gateway.registry_cache import model_not_found

from tests.support.eventually import eventually
from tests.unit.gateway.fakes import record


class FakeResolver:
    def __init__(self, *records: VersionRecord) -> None:
        self.records = list(records)
        self.resolved = 0
        self.invalidated: list[str | None] = []

    async def resolve(self, model: str, requested: str) -> VersionRecord:
        self.resolved += 1
        for candidate in self.records:
            if candidate.model_name == model and requested in ("", candidate.version):
                return candidate
        raise model_not_found(model)

    def invalidate(self, model: str | None = None) -> None:
        self.invalidated.append(model)


class FakeQueue:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, str, bytes]] = []
        self.cancelled: list[tuple[str, str, str, int]] = []
        self.refuse: list[BaseException] = []

    async def enqueue(self, model: str, version: str, job: bytes) -> None:
        if self.refuse:
            raise self.refuse.pop(0)
        self.jobs.append((model, version, job))

    def cancel(self, model: str, version: str, job_id: str, ttl_ms: int) -> None:
        self.cancelled.append((model, version, job_id, ttl_ms))


class Setup:
    def __init__(self, **plane_options: Any) -> None:
        unused: Any = None
        self.bus = ReplyBus(unused, "sluice:{gw:t}:replies", block_s=1.0, count=10)
        self.resolver = FakeResolver(record(response_timeout_s=30))
        self.queue = FakeQueue()
        self.plane = DataPlane(
            self.resolver, self.queue, self.bus, reply_to="sluice:{gw:t}:replies", clock_ms=lambda: 1_000_000,
            **plane_options,
        )  # fmt: skip

    async def next_job_id(self) -> str:
        await eventually(lambda: bool(self.queue.jobs), interval_s=0)
        return decode_job(self.queue.jobs[-1][2]).job_id

    def reply(self, job_id: str, **fields: Any) -> None:
        from sluice.envelope import encode_reply

        self.bus.dispatch(encode_reply(Reply(job_id=job_id, **fields)))


def call(model: str = "echo", version: str = "", timeout_s: float | None = None) -> InferenceCall:
    return InferenceCall(WireProtocol.TORCHSERVE_GRPC, model, version, b"request", timeout_s=timeout_s)


async def answered(setup: Setup, start: Callable[[], Any], **reply: Any) -> Any:
    task = asyncio.ensure_future(start())
    setup.reply(await setup.next_job_id(), **reply)
    return await task


async def test_infer_returns_the_final_reply_and_leaves_nothing_behind() -> None:
    setup = Setup()
    reply = await answered(setup, lambda: setup.plane.infer(call()), final=True, payload=b"out")
    assert reply.payload == b"out"
    assert setup.bus.in_flight == 0
    assert setup.queue.cancelled == []
    job = decode_job(setup.queue.jobs[0][2])
    assert (job.model_name, job.model_version, job.request) == ("echo", "1.0", b"request")
    assert job.deadline_unix_ms - job.enqueued_unix_ms == 30_000  # the version's response timeout


async def test_failure_reply_raises_the_domain_error() -> None:
    setup = Setup()
    with pytest.raises(SluiceError) as caught:
        await answered(
            setup, lambda: setup.plane.infer(call()), final=True, error_code="HANDLER_FAILED", status_code=400
        )
    assert (caught.value.code, caught.value.http_status) == (ErrorCode.HANDLER_FAILED, 400)
    assert setup.queue.cancelled == []


async def test_deadline_raises_and_flags_the_job() -> None:
    setup = Setup(cancel_margin_s=60)
    with pytest.raises(SluiceError) as caught:
        await setup.plane.infer(call(timeout_s=0.01))
    assert caught.value.code is ErrorCode.DEADLINE_EXCEEDED
    ((model, version, job_id, ttl_ms),) = setup.queue.cancelled
    assert (model, version, job_id) == ("echo", "1.0", decode_job(setup.queue.jobs[0][2]).job_id)
    assert ttl_ms == 60_000 + 10
    assert setup.bus.in_flight == 0


async def test_cancelled_call_flags_the_job() -> None:
    setup = Setup()
    task = asyncio.ensure_future(setup.plane.infer(call()))
    await setup.next_job_id()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(setup.queue.cancelled) == 1
    assert setup.bus.in_flight == 0


async def test_names_are_checked_before_the_registry() -> None:
    setup = Setup()
    for bad in [call(model="a{b}"), call(version="1:0"), call(model="")]:
        with pytest.raises(SluiceError):
            await setup.plane.infer(bad)
    assert setup.resolver.resolved == 0


async def test_stale_registry_is_reloaded_once() -> None:
    setup = Setup()
    setup.queue.refuse.append(VersionGone())
    reply = await answered(setup, lambda: setup.plane.infer(call()), final=True)
    assert reply.final
    assert setup.resolver.invalidated == ["echo"]


async def test_a_version_gone_twice_is_not_found() -> None:
    setup = Setup()
    setup.queue.refuse.extend([VersionGone(), VersionGone()])
    with pytest.raises(SluiceError) as caught:
        await setup.plane.infer(call(version="1.0"))
    assert (caught.value.code, caught.value.message) == (
        ErrorCode.VERSION_NOT_FOUND,
        "Model version: 1.0 does not exist for model: echo",
    )
    assert setup.bus.in_flight == 0


async def test_refused_enqueue_leaves_no_waiter_and_no_cancel_flag() -> None:
    setup = Setup()
    setup.queue.refuse.append(SluiceError(ErrorCode.QUEUE_FULL, "full"))
    with pytest.raises(SluiceError):
        await setup.plane.infer(call())
    assert setup.bus.in_flight == 0
    assert setup.queue.cancelled == []


async def collect(setup: Setup, replies: list[dict[str, Any]]) -> list[bytes]:
    received: list[bytes] = []

    async def consume() -> None:
        async for reply in setup.plane.infer_stream(call()):
            received.append(reply.payload)

    task = asyncio.ensure_future(consume())
    job_id = await setup.next_job_id()
    for fields in replies:
        setup.reply(job_id, **fields)
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
    assert setup.queue.cancelled == []


async def test_stream_fails_when_a_new_attempt_follows_forwarded_chunks() -> None:
    setup = Setup()
    with pytest.raises(SluiceError) as caught:
        await collect(setup, [{"seq": 0, "attempt": 1}, {"seq": 0, "attempt": 2}])
    assert (caught.value.code, caught.value.message) == (ErrorCode.UNAVAILABLE, "worker lost mid-stream")
    assert len(setup.queue.cancelled) == 1  # the second attempt is still running


async def test_submit_stream_marks_the_job_streaming_with_headers() -> None:
    setup = Setup()
    job = await setup.plane.submit_stream(
        InferenceCall(WireProtocol.TORCHSERVE_GRPC, "echo", "", b"r", headers={"ts_request_sequence_id": "s"})
    )
    sent = decode_job(setup.queue.jobs[0][2])
    assert sent.streaming
    assert dict(sent.headers) == {"ts_request_sequence_id": "s"}
    job.close()
    job.close()
    assert len(setup.queue.cancelled) == 1


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
    assert setup.queue.cancelled == []
