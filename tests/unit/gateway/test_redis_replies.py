"""The Redis reply source without Redis: decoding and dispatch of XREAD's entries, the read position,
and what a recreated reply stream does to the calls waiting on it."""

from typing import Any

import pytest
from sluice.envelope import FIELD, Reply, encode_reply
from sluice.errors import ErrorCode, SluiceError
from sluice_gateway.broker import redis_replies
from sluice_gateway.broker.redis_replies import RedisReplies, next_id


def make_replies() -> RedisReplies:
    unused: Any = None
    return RedisReplies(unused, "sluice:{gw:test}:replies", block_s=1.0, count=10)


def raw(job_id: str, *, seq: int = 0, final: bool = True, payload: bytes = b"") -> bytes:
    return encode_reply(Reply(job_id=job_id, seq=seq, final=final, payload=payload, attempt=1))


def test_next_id() -> None:
    assert next_id(b"1700000000000-0") == b"1700000000000-1"
    assert next_id(b"5-41") == b"5-42"


async def test_dispatch_decodes_and_drops_garbage() -> None:
    replies = make_replies()
    assert replies.reply_to == "sluice:{gw:test}:replies"
    waiter = replies.expect("j1")
    replies.dispatch(b"\xff not a reply")
    replies.dispatch(encode_reply(Reply(job_id="j1")).replace(b"\x08\x01", b"\x08\x09", 1))  # schema 9
    assert not waiter.future.done()
    replies.dispatch(raw("j1", payload=b"out"))
    assert (await waiter.result()).payload == b"out"
    replies.forget("j1")
    assert replies.in_flight == 0


async def test_consume_dispatches_and_moves_the_read_position() -> None:
    replies = make_replies()
    waiter = replies.expect_stream("j1", limit=10)
    entries = [[b"1-0", [FIELD, raw("j1", final=False)]], [b"1-1", [b"other", b""]], [b"1-2", None]]
    replies._consume([[b"stream", entries]])
    assert (await waiter.get()).job_id == "j1"
    assert (replies._last_id, replies._trim_from) == (b"1-2", b"1-3")


async def test_a_recreated_stream_is_read_from_its_start_and_fails_earlier_calls() -> None:
    replies = make_replies()
    replies._consume([[b"stream", [[b"7-0", [FIELD, raw("other")]]]]])
    early = replies.expect("early")
    mark = replies.mark()
    late = replies.expect_stream("late", limit=10)
    lost = SluiceError(ErrorCode.UNAVAILABLE, "lost")
    assert replies.stream_recreated(mark, lost) == 1
    assert (replies._last_id, replies._trim_from) == (b"0-0", None)
    with pytest.raises(SluiceError) as caught:
        await early.result()
    assert caught.value is lost
    replies.dispatch(raw("late", final=False))
    assert (await late.get()).job_id == "late"


def test_read_replies_are_trimmed_in_bulk() -> None:
    replies = make_replies()
    replies._consume([[b"stream", [[b"1-0", [FIELD, raw("j1")]]]]])
    assert replies._trim_from == b"1-1"
    assert not replies._trim_due()  # one reply: not yet
    many = [[f"2-{n}".encode(), [FIELD, raw(f"j{n}")]] for n in range(redis_replies.TRIM_EVERY_ENTRIES)]
    replies._consume([[b"stream", many]])
    assert replies._trim_due()


def test_large_replies_are_trimmed_sooner() -> None:
    replies = make_replies()
    replies._consume(
        [[b"stream", [[b"1-0", [FIELD, raw("j1", payload=bytes(redis_replies.TRIM_EVERY_BYTES))]]]]]
    )
    assert replies._trim_due()


def test_a_reply_waits_at_most_trim_after_s(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("sluice_gateway.broker.redis_replies.time.monotonic", lambda: clock[0])
    replies = make_replies()
    replies._consume([[b"stream", [[b"1-0", [FIELD, raw("j1")]]]]])
    assert not replies._trim_due()
    clock[0] += redis_replies.TRIM_AFTER_S
    assert replies._trim_due()


def test_a_read_blocks_no_longer_than_until_the_trim_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("sluice_gateway.broker.redis_replies.time.monotonic", lambda: clock[0])
    replies = make_replies()  # block_s=1.0
    assert replies._block_for_ms() == 1000
    replies._consume([[b"stream", [[b"1-0", [FIELD, raw("j1")]]]]])
    assert replies._block_for_ms() == int(redis_replies.TRIM_AFTER_S * 1000)
    clock[0] += redis_replies.TRIM_AFTER_S + 1
    assert replies._block_for_ms() == 1


async def test_an_entry_with_several_replies_dispatches_each_in_field_order() -> None:
    replies = make_replies()
    stream = replies.expect_stream("j1", limit=100)
    other = replies.expect("j2")
    chunks = [raw("j1", seq=n, final=False, payload=f"t{n}".encode()) for n in range(3)]
    fields = [FIELD, chunks[0], FIELD, raw("j2", payload=b"done"), b"other", b"x", FIELD, chunks[1]]
    fields += [FIELD, chunks[2], FIELD, raw("j1", seq=3, payload=b"end")]
    replies._consume([[b"stream", [[b"4-0", fields]]]])
    got = [await stream.get() for _ in range(4)]
    assert [(r.seq, r.payload, r.final) for r in got] == [
        (0, b"t0", False),
        (1, b"t1", False),
        (2, b"t2", False),
        (3, b"end", True),
    ]
    assert (await other.result()).payload == b"done"
    # The trim counts the entry once and every reply's bytes.
    assert replies._untrimmed == 1
    assert replies._untrimmed_bytes == sum(
        len(value) for name, value in zip(fields[::2], fields[1::2], strict=True) if name == FIELD
    )
    assert (replies._last_id, replies._trim_from) == (b"4-0", b"4-1")


def test_the_bytes_of_several_replies_in_one_entry_make_the_trim_due() -> None:
    replies = make_replies()
    half = bytes(redis_replies.TRIM_EVERY_BYTES // 2)
    replies._consume(
        [[b"stream", [[b"1-0", [FIELD, raw("a", payload=half), FIELD, raw("b", payload=half)]]]]]
    )
    assert replies._trim_due()
