"""Waiters and their registry: replies by job id, duplicates and strangers dropped, waiters failed in
bulk, slow stream readers failed."""

import asyncio

import pytest
from sluice.envelope import Reply
from sluice.errors import ErrorCode, SluiceError
from sluice_gateway.waiters import ReplyWaiters, StreamWaiter


def reply(job_id: str, *, final: bool = True, payload: bytes = b"") -> Reply:
    return Reply(job_id=job_id, final=final, payload=payload, attempt=1)


async def test_a_unary_waiter_gets_the_first_final_reply_only() -> None:
    waiters = ReplyWaiters()
    waiter = waiters.expect("j1")
    waiters.deliver(reply("j1", final=False, payload=b"partial"))
    waiters.deliver(reply("j1", payload=b"first"))
    waiters.deliver(reply("j1", payload=b"duplicate"))
    assert (await waiter.result()).payload == b"first"


async def test_replies_for_unknown_or_forgotten_jobs_are_dropped() -> None:
    waiters = ReplyWaiters()
    waiter = waiters.expect("j1")
    waiters.deliver(reply("someone-else"))
    assert not waiter.future.done()
    waiters.forget("j1")
    waiters.deliver(reply("j1"))
    assert waiters.in_flight == 0


async def test_fail_before_fails_only_earlier_waiters() -> None:
    waiters = ReplyWaiters()
    early = waiters.expect("early")
    mark = waiters.mark()
    late = waiters.expect("late")
    assert waiters.fail_before(mark, SluiceError(ErrorCode.UNAVAILABLE, "lost")) == 1
    with pytest.raises(SluiceError):
        await early.result()
    assert not late.future.done()


async def test_stream_waiter_fails_a_reader_that_falls_behind() -> None:
    waiter = StreamWaiter(mark=1, limit=2)
    for seq in range(3):
        waiter.deliver(Reply(job_id="j", seq=seq))
    with pytest.raises(SluiceError) as caught:
        await waiter.get()
    assert caught.value.code is ErrorCode.UNAVAILABLE


async def test_stream_waiter_reports_a_failure_before_buffered_replies() -> None:
    waiter = StreamWaiter(mark=1, limit=10)
    waiter.deliver(Reply(job_id="j"))
    waiter.fail(SluiceError(ErrorCode.UNAVAILABLE, "lost"))
    with pytest.raises(SluiceError):
        await waiter.get()


async def test_stream_waiter_wakes_its_reader() -> None:
    waiter = StreamWaiter(mark=1, limit=10)
    reader = asyncio.ensure_future(waiter.get())
    await asyncio.sleep(0)
    waiter.deliver(Reply(job_id="j", payload=b"x"))
    assert (await reader).payload == b"x"
