"""Reply dispatch: by job id, duplicates and strangers dropped, waiters failed in bulk."""

import asyncio
from typing import Any

import pytest
from sluice.envelope import FIELD, Reply, encode_reply
from sluice.errors import ErrorCode, SluiceError
from sluice_gateway.broker.redis_replies import ReplyBus, next_id
from sluice_gateway.waiters import StreamWaiter


def make_bus() -> ReplyBus:
    unused: Any = None
    return ReplyBus(unused, "sluice:{gw:test}:replies", block_s=1.0, count=10)


def raw(job_id: str, *, seq: int = 0, final: bool = True, payload: bytes = b"") -> bytes:
    return encode_reply(Reply(job_id=job_id, seq=seq, final=final, payload=payload, attempt=1))


def test_next_id() -> None:
    assert next_id(b"1700000000000-0") == b"1700000000000-1"
    assert next_id(b"5-41") == b"5-42"


async def test_a_unary_waiter_gets_the_first_final_reply_only() -> None:
    bus = make_bus()
    waiter = bus.expect("j1")
    bus.dispatch(raw("j1", final=False, payload=b"partial"))
    bus.dispatch(raw("j1", payload=b"first"))
    bus.dispatch(raw("j1", payload=b"duplicate"))
    assert (await waiter.result()).payload == b"first"


async def test_replies_for_unknown_jobs_and_garbage_are_dropped() -> None:
    bus = make_bus()
    waiter = bus.expect("j1")
    bus.dispatch(raw("someone-else"))
    bus.dispatch(b"\xff not a reply")
    bus.dispatch(encode_reply(Reply(job_id="j1")).replace(b"\x08\x01", b"\x08\x09", 1))  # schema 9
    assert not waiter.future.done()
    bus.forget("j1")
    bus.dispatch(raw("j1"))
    assert bus.in_flight == 0


async def test_fail_before_fails_only_earlier_waiters() -> None:
    bus = make_bus()
    early = bus.expect("early")
    mark = bus.mark()
    late = bus.expect("late")
    assert bus.fail_before(mark, SluiceError(ErrorCode.UNAVAILABLE, "lost")) == 1
    with pytest.raises(SluiceError):
        await early.result()
    assert not late.future.done()


async def test_consume_dispatches_and_moves_the_read_position() -> None:
    bus = make_bus()
    waiter = bus.expect_stream("j1", limit=10)
    entries = [[b"1-0", [FIELD, raw("j1", final=False)]], [b"1-1", [b"other", b""]], [b"1-2", None]]
    bus._consume([[b"stream", entries]])
    assert (await waiter.get()).job_id == "j1"
    assert (bus._last_id, bus._trim_from) == (b"1-2", b"1-3")
    bus.restart_from_beginning()
    assert (bus._last_id, bus._trim_from) == (b"0-0", None)


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
