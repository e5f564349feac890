"""Reply stream entries holding several replies (``XADD <stream> NOMKSTREAM * m <Reply> m <Reply> ...``,
as a worker publishes one iteration's chunks) on a real redis-server: Redis keeps every repeated field
in order, the reply reader dispatches each in order and trims them, and calls through the gateway
get them all."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import grpc
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.redis.pipelined import PipelinedRedis
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice_gateway.app import Gateway
from sluice_gateway.broker.redis_replies import RedisReplies

from tests.integration.gateway.conftest import register
from tests.support.responder import Responder, ok, write_replies

if TYPE_CHECKING:
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
STREAM = "sluice:{gw:test}:replies"


def reply(job_id: str, seq: int, *, final: bool = False) -> Reply:
    return Reply(job_id=job_id, seq=seq, final=final, attempt=1, payload=f"{job_id}-{seq}".encode())


async def test_redis_keeps_every_repeated_field_of_an_entry_in_order(pipelined_redis: PipelinedRedis) -> None:
    await pipelined_redis.send("XADD", STREAM, "*", "x", "0")
    entry_id = await pipelined_redis.send(
        "XADD", STREAM, "NOMKSTREAM", "*", "m", b"one", "m", b"two", "other", b"-", "m", b"three"
    )
    result = await pipelined_redis.send("XREAD", "COUNT", 10, "STREAMS", STREAM, "0-0")
    ((_stream, entries),) = result
    assert entries[1] == [entry_id, [b"m", b"one", b"m", b"two", b"other", b"-", b"m", b"three"]]
    # NOMKSTREAM: a gateway's stream that is gone is not recreated by a late worker.
    assert await pipelined_redis.send("XADD", "gone", "NOMKSTREAM", "*", "m", b"a", "m", b"b") is None


async def test_the_reader_dispatches_every_reply_of_an_entry_in_order_then_trims_it(
    pipelined_redis: PipelinedRedis, redis_client: aioredis.Redis
) -> None:
    await redis_client.xadd(STREAM, {"created": b"1"})
    replies = RedisReplies(pipelined_redis, STREAM, block_s=0.1, count=10)
    a, b = replies.expect_stream("a", limit=100), replies.expect("b")
    await write_replies(redis_client, STREAM, [reply("a", 0), reply("b", 0, final=True), reply("a", 1)])
    await write_replies(redis_client, STREAM, [reply("a", n, final=n == 9) for n in range(2, 10)])
    await replies.read_once()
    assert [(await a.get()).seq for _ in range(10)] == list(range(10))
    assert (await b.result()).payload == b"b-0"
    replies._trim_due_at = 0.0  # due now: the next read trims everything read so far
    await replies.read_once()
    assert await redis_client.xlen(STREAM) == 0


def chunked(count: int, per_entry: int) -> Callable[[Job], AsyncIterator[Reply | list[Reply]]]:
    """``count`` intermediate replies then the final one, ``per_entry`` replies to a stream entry."""

    async def script(job: Job) -> AsyncIterator[Reply | list[Reply]]:
        replies = [ok(job, f"tok{n}".encode(), seq=n, final=False) for n in range(count)]
        replies.append(ok(job, b"end", seq=count))
        for start in range(0, len(replies), per_entry):
            yield replies[start : start + per_entry]

    return script


async def test_a_stream_of_multi_reply_entries_reaches_the_client_complete_and_in_order(
    gateway: Gateway, stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    await responder(chunked(50, per_entry=7))
    call = stub.StreamPredictions(PredictionsRequest(model_name="echo", input={"data": b"x"}), timeout=10)
    assert [r.prediction async for r in call] == [f"tok{n}".encode() for n in range(50)] + [b"end"]
    assert await call.code() == grpc.StatusCode.OK
    assert gateway.replies.in_flight == 0


async def test_one_entry_answers_the_jobs_of_several_calls(
    stub: "InferenceAPIsServiceAsyncStub", redis_client: aioredis.Redis, responder: Start
) -> None:
    """A worker's iteration ends requests of several clients: one entry, each call its own answer."""
    await register(redis_client)
    held: list[Job] = []
    release = asyncio.Event()

    async def hold(job: Job) -> AsyncIterator[Reply]:
        held.append(job)
        await release.wait()
        return
        yield  # an async generator that yields nothing: the test answers

    peer = await responder(hold)
    calls = [
        asyncio.ensure_future(stub.Predictions(PredictionsRequest(model_name="echo", input={"data": d})))
        for d in (b"a", b"b")
    ]
    await peer.wait_for_jobs(2)
    answers = {job.job_id: ok(job, PredictionsRequest.FromString(job.request).input["data"]) for job in held}
    await write_replies(redis_client, held[0].reply_to, list(answers.values()))
    release.set()
    assert sorted(r.prediction for r in await asyncio.gather(*calls)) == [b"a", b"b"]
