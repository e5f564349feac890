"""The admission rule (sluice.admission), its one table, against a real Redis and through both of its
scripts: the check-and-add script (the gateway's small jobs, the manager's describe jobs) and the check
of a job a plain XADD added in the same transaction (the gateway's large jobs). Each row must come out
the same way through both: the outcome, what the stream holds afterwards, and a demand event for a
cold admission only. The callers' own tests show that they admit through it
(tests/integration/gateway/test_redis_admission.py, tests/integration/manager/test_describe_job.py)."""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from sluice import admission
from sluice.admission import Outcome
from sluice.redis import keys

MODEL, VERSION = "m", "1"
CONFIG, WORKERS, STREAM = admission.script_keys(MODEL, VERSION)
JOB = b"the job"
DONE = "done"  # published after each call: the demand events before it are the script's


@dataclass(frozen=True)
class Case:
    """A version (None: not registered), its workers, whether it scales from zero, its queue bound
    (None: none), the jobs it already holds, and what the rule decides for one more."""

    state: str | None
    workers: int
    scales_from_zero: bool
    job_queue_size: int | None
    queued: int
    outcome: Outcome


TABLE = {
    "not registered": Case(None, 0, False, 2, 0, Outcome.NOT_FOUND),
    "retired": Case("retired", 1, False, 2, 0, Outcome.NOT_FOUND),
    "retired, scales from zero": Case("retired", 0, True, 2, 0, Outcome.NOT_FOUND),
    "room": Case("active", 1, False, 2, 0, Outcome.ADMITTED),
    "last place": Case("active", 1, False, 2, 1, Outcome.ADMITTED),
    "full": Case("active", 1, False, 2, 2, Outcome.QUEUE_FULL),
    "no queue": Case("active", 1, False, 0, 0, Outcome.QUEUE_FULL),
    "no bound": Case("active", 1, False, None, 5, Outcome.ADMITTED),
    "no worker": Case("active", 0, False, 2, 0, Outcome.NO_WORKER),
    "no worker before full": Case("active", 0, False, 2, 2, Outcome.NO_WORKER),
    "cold": Case("active", 0, True, 2, 0, Outcome.COLD),
    "cold, last place": Case("active", 0, True, 2, 1, Outcome.COLD),
    "cold and full": Case("active", 0, True, 2, 2, Outcome.QUEUE_FULL),
    "scales from zero, a worker runs": Case("active", 1, True, 2, 0, Outcome.ADMITTED),
    "scales from zero, full": Case("active", 1, True, 2, 2, Outcome.QUEUE_FULL),
}


async def check_and_add(redis: "aioredis.Redis") -> object:
    """The check-and-add script."""
    return await redis.eval(admission.ENQUEUE_SCRIPT, 3, CONFIG, WORKERS, STREAM, JOB, keys.EVENTS_CHANNEL)


async def add_then_check(redis: "aioredis.Redis") -> object:
    """A plain XADD, then the check of the added job, in one MULTI/EXEC."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(STREAM, {"m": JOB})
        pipe.eval(admission.ADMIT_ADDED_SCRIPT, 3, CONFIG, WORKERS, STREAM, keys.EVENTS_CHANNEL)
        _added, answer = await pipe.execute()
    return answer


PATHS = pytest.mark.parametrize(
    "admit", [check_and_add, add_then_check], ids=["check-and-add", "add-then-check"]
)


async def given(redis: "aioredis.Redis", case: Case) -> None:
    if case.state is not None:
        config: dict[Any, Any] = {
            "state": case.state,
            "scale_from_zero": "1" if case.scales_from_zero else "0",
        }
        if case.job_queue_size is not None:
            config["job_queue_size"] = case.job_queue_size
        await redis.hset(CONFIG, mapping=config)
    for worker in range(case.workers):
        await redis.hset(WORKERS, f"w{worker}", "{}")
    for _ in range(case.queued):
        await redis.xadd(STREAM, {"m": b"queued"})


@pytest.fixture
async def demands(redis_client: "aioredis.Redis") -> AsyncIterator[Callable[[], Awaitable[list[Any]]]]:
    """The demand events published since the last call."""
    async with redis_client.pubsub() as events:
        await events.subscribe(keys.EVENTS_CHANNEL)
        assert await events.get_message(timeout=5.0) is not None

        async def since() -> list[Any]:
            await redis_client.publish(keys.EVENTS_CHANNEL, DONE)
            seen: list[Any] = []
            while (
                message := await events.get_message(ignore_subscribe_messages=True, timeout=5.0)
            ) is not None:
                if message["data"] == DONE.encode():
                    return seen
                seen.append(json.loads(message["data"]))
            raise AssertionError("the marker event never came")

        yield since


@PATHS
@pytest.mark.parametrize("case", TABLE.values(), ids=TABLE.keys())
async def test_the_admission_rule(
    redis_client: "aioredis.Redis",
    demands: Callable[[], Awaitable[list[Any]]],
    admit: Callable[["aioredis.Redis"], Awaitable[object]],
    case: Case,
) -> None:
    await given(redis_client, case)
    outcome = admission.outcome_of(await admit(redis_client))
    assert outcome is case.outcome
    entries: Any = await redis_client.xrange(STREAM)
    admitted = outcome in (Outcome.ADMITTED, Outcome.COLD)
    assert [fields[b"m"] for _id, fields in entries] == [b"queued"] * case.queued + [JOB] * admitted
    if not admitted and case.queued == 0:
        assert not await redis_client.exists(STREAM), "a refused job leaves no stream behind"
    cold = [{"kind": "demand", "stream": STREAM}]
    assert await demands() == (cold if outcome is Outcome.COLD else [])


def test_every_named_answer_and_an_entry_id_read_as_an_outcome() -> None:
    assert {admission.outcome_of(outcome.value.encode()) for outcome in Outcome} == set(Outcome)
    assert admission.outcome_of("QUEUE_FULL") is Outcome.QUEUE_FULL  # a client that decodes answers
    assert admission.outcome_of(b"1700000000000-0") is Outcome.ADMITTED
