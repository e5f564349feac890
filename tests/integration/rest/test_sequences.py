"""A stateful model over TorchServe's REST API, against the real gateway and Redis (the holder of the
sequences is a stand-in: tests/support/sequence_holder.py): a request without a sequence starts one
and the answer names it; the sequence's requests reach its stream with TorchServe's headers; closed
sequences get TorchServe's refusal; models that are not stateful route as before."""

import asyncio
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job
from sluice.errors import no_worker_message
from sluice.redis import keys

from tests.integration.gateway.conftest import register
from tests.integration.rest.conftest import raw
from tests.support.eventually import eventually
from tests.support.responder import fixed
from tests.support.sequence_holder import SequenceHolder

STATEFUL: dict[str, Any] = {
    "sequence_batching": True,
    "sequence_max_idle_ms": 60_000,
    "max_sequence_job_queue_size": 4,
}
CUSTOM_NAMES = {
    "header_key_sequence_id": "x-sequence",
    "header_key_sequence_start": "x-sequence-start",
    "header_key_sequence_end": "x-sequence-end",
}
ID, START, END = "ts_request_sequence_id", "ts_request_sequence_start", "ts_request_sequence_end"


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    return getattr(request, "param", {})


def body(job: Job) -> bytes:
    return b"answer to " + job.request


async def test_a_request_without_a_sequence_starts_one_and_the_answer_names_it(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis
) -> None:
    await register(redis_client, **STATEFUL)
    holder = await SequenceHolder(redis_client, "echo").announce()
    post = asyncio.ensure_future(http.post("/predictions/echo", data=b"first"))
    (sequence_id,) = await _held(holder)
    assert sequence_id.startswith("ts-seq-")
    job = await holder.answer(sequence_id, lambda j: raw(j, body(j)))
    async with await post as resp:
        assert resp.status == 200
        assert await resp.read() == b"answer to first"
        assert resp.headers[ID] == sequence_id
    assert (job.sequence_id, job.sequence_start, job.sequence_end) == (sequence_id, True, False)
    assert (job.headers[ID], job.headers[START]) == (sequence_id, "true")
    assert not await redis_client.xlen(keys.job_stream("echo", "1.0")), "nothing in the shared stream"


async def test_the_sequences_requests_join_it_in_order_until_it_ends(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis
) -> None:
    await register(redis_client, **STATEFUL)
    holder = await SequenceHolder(redis_client, "echo").announce()
    second = asyncio.ensure_future(http.post("/predictions/echo", data=b"2", headers={ID: "s1"}))
    await _held(holder)
    last = asyncio.ensure_future(http.post("/predictions/echo", data=b"3", headers={ID: "s1", END: "true"}))
    await _queued(holder, "s1", 2)
    joined = await holder.answer("s1", lambda j: raw(j, body(j)))
    # A streamed answer (intermediate replies) names the sequence too.
    ending = await holder.answer(
        "s1",
        lambda j: raw(j, b"part-", final=False, headers={"ts_stream_next": "true"}),
        lambda j: raw(j, b"end", seq=1, headers={"ts_stream_next": "false"}),
    )
    for call, expected in ((second, b"answer to 2"), (last, b"part-end")):
        async with await call as resp:
            assert (resp.status, await resp.read(), resp.headers[ID]) == (200, expected, "s1")
    # The first request of a new id starts it, unmarked, as in TorchServe.
    assert (joined.request, joined.sequence_start, dict(joined.headers).get(START)) == (b"2", False, None)
    assert (ending.request, ending.sequence_end, ending.headers[END]) == (b"3", True, "true")

    async with http.post("/predictions/echo", data=b"4", headers={ID: "s1"}) as resp:
        assert resp.status == 503
        assert (await resp.json())["message"] == no_worker_message("echo")
        assert ID not in resp.headers
    assert await holder.queued("s1") == []


@pytest.mark.parametrize("settings_overrides", [CUSTOM_NAMES], indirect=True)
async def test_the_header_names_are_the_configured_ones(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis
) -> None:
    await register(redis_client, **STATEFUL)
    holder = await SequenceHolder(redis_client, "echo").announce()
    headers = {"X-Sequence": "s2", "X-Sequence-Start": "true", ID: "ignored"}
    post = asyncio.ensure_future(http.post("/predictions/echo", data=b"x", headers=headers))
    await _held(holder)
    job = await holder.answer("s2", lambda j: raw(j, body(j)))
    async with await post as resp:
        assert (resp.status, resp.headers["x-sequence"]) == (200, "s2")
    assert (job.sequence_id, job.sequence_start) == ("s2", True)
    assert (job.headers["x-sequence"], job.headers["x-sequence-start"]) == ("s2", "true")


async def test_a_model_that_is_not_stateful_routes_as_before(http, redis_client, responder) -> None:  # type: ignore[no-untyped-def]
    await register(redis_client, sequence_batching=True)  # no idle time: not stateful, as in TorchServe
    peer = await responder(fixed(lambda job: raw(job, body(job))))
    async with http.post("/predictions/echo", data=b"x", headers={ID: "s"}) as resp:
        assert (resp.status, await resp.read()) == (200, b"answer to x")
        assert ID not in resp.headers
    async with http.post("/predictions/echo", data=b"y") as resp:
        assert resp.status == 200
    first, second = peer.jobs
    assert (first.headers[ID], first.sequence_id) == ("s", "s")
    assert ID not in second.headers
    assert not second.sequence_id


async def _held(holder: SequenceHolder) -> set[str]:
    await eventually(holder.held)
    return await holder.held()


async def _queued(holder: SequenceHolder, sequence_id: str, count: int) -> None:
    async def enough() -> bool:
        return len(await holder.queued(sequence_id)) >= count

    await eventually(enough)
