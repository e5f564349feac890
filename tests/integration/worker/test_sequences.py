"""Stateful models on real workers and a real Redis, jobs admitted by the gateway's own admission
script: every job of a sequence runs on the worker holding it, in order; sequences close; a worker's
death moves its sequences with their saved states, or fails the rest of them with a clear error."""

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from sluice import envelope
from sluice.envelope import Reply
from sluice.errors import ErrorCode
from sluice.redis import keys
from sluice.redis.pipelined import PipelinedRedis
from sluice.registry.records import VersionRecord
from sluice_gateway.broker.redis_admission import RedisJobAdmission
from sluice_gateway.broker.seam import Admission, SequenceStep
from sluice_gateway.sequences import SequenceHeaders

from tests.integration.worker.harness import ReplyStream, WorkerProcess, job, prediction, register
from tests.support import models
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer

STATEFUL = {
    "sequence_batching": True,
    "sequence_max_idle_ms": 60_000,
    "max_num_sequence": 64,
    "max_sequence_job_queue_size": 16,
    "batch_size": 4,
    "max_batch_delay_ms": 20,
}


class Sequences:
    """Sends sequence jobs the way the gateway's data plane does and reads their answers."""

    def __init__(self, admission: RedisJobAdmission, record: VersionRecord, replies: ReplyStream) -> None:
        self.admission = admission
        self.record = record
        self.replies = replies
        self.headers = SequenceHeaders()

    async def send(
        self, sid: str, value: int, *, start: bool | None = None, end: bool = False
    ) -> tuple[Admission, str]:
        step = SequenceStep(sid, start=start, end=end)
        item = job(
            self.record.model_name,
            self.record.version,
            {"data": str(value).encode()},
            reply_to=self.replies.key,
            headers=self.headers.of(step),
        )
        item.sequence_id, item.sequence_start, item.sequence_end = sid, bool(start), end
        admission = await self.admission.enqueue_sequence(self.record, envelope.encode_job(item), step)
        return admission, item.job_id

    async def answers(self, job_ids: list[str], timeout_s: float = 30.0) -> list[Reply]:
        finals = await self.replies.finals(job_ids, timeout_s)
        return [finals[job_id][-1] for job_id in job_ids]


async def _none(count: Awaitable[int]) -> bool:
    return await count == 0


def result(reply: Reply) -> dict[str, Any]:
    assert not reply.error_code, reply
    parsed: dict[str, Any] = json.loads(prediction(reply))
    return parsed


@pytest.fixture
async def admission(module_redis: RedisServer) -> AsyncIterator[RedisJobAdmission]:
    pipelined = PipelinedRedis(module_redis.url)
    try:
        yield RedisJobAdmission(pipelined)
    finally:
        await pipelined.close()


Start = Callable[..., Awaitable[tuple[Sequences, list[WorkerProcess]]]]


@pytest.fixture
def start(
    module_redis: RedisServer,
    client: "aioredis.Redis",
    admission: RedisJobAdmission,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> Start:
    """Register ``spec`` as a stateful version (``fields`` over STATEFUL) and start ``count`` READY
    workers; the sequences sender and the workers."""

    async def started(
        spec: models.ModelSpec, count: int, **fields: Any
    ) -> tuple[Sequences, list[WorkerProcess]]:
        record = await register(client, spec, tmp_path, **{**STATEFUL, **fields})
        new = [WorkerProcess(module_redis.url, spec.name, "1.0", tmp_path).start() for _ in range(count)]
        workers.extend(new)
        for worker in new:
            worker.wait_ready()
        return Sequences(admission, record, await ReplyStream(client).open()), new

    return started


async def test_each_sequence_runs_in_order_on_one_worker_and_sequences_share_batches(start: Start) -> None:
    sequences, _ = await start(models.stateful_model("acc"), 2)
    steps = 6
    sent: dict[str, list[str]] = {}
    for step in range(1, steps + 1):
        for n in range(8):
            admitted, job_id = await sequences.send(f"seq-{n}", step * (n + 1))
            assert admitted in (Admission.ADMITTED, Admission.ADMITTED_COLD)
            sent.setdefault(f"seq-{n}", []).append(job_id)
    pids: dict[str, set[int]] = {}
    batches: list[list[str]] = []
    for n in range(8):
        sid = f"seq-{n}"
        answers = [result(reply) for reply in await sequences.answers(sent[sid])]
        expected = [(n + 1) * step * (step + 1) // 2 for step in range(1, steps + 1)]
        assert [a["total"] for a in answers] == expected, answers
        assert {a["sequence"] for a in answers} == {sid}
        pids[sid] = {a["pid"] for a in answers}
        batches += [a["batch"] for a in answers]
    assert all(len(p) == 1 for p in pids.values()), pids
    assert len(set().union(*pids.values())) == 2, "sequences should spread over both workers"
    assert max(len(batch) for batch in batches) > 1, "jobs of different sequences should share batches"
    assert all(len(set(batch)) == len(batch) for batch in batches), "one job per sequence in a batch"


async def test_an_ended_sequence_closes_and_a_later_request_for_it_is_refused(
    start: Start, client: "aioredis.Redis"
) -> None:
    sequences, (worker,) = await start(models.stateful_model("ending"), 1)
    _, first = await sequences.send("s", 5)
    _, last = await sequences.send("s", 7, end=True)
    answers = [result(reply) for reply in await sequences.answers([first, last])]
    assert [(a["total"], a["end"]) for a in answers] == [(5, False), (12, True)]
    assert (await sequences.send("s", 1))[0] is Admission.SEQUENCE_CLOSED
    assert (await sequences.send("s", 1, start=False))[0] is Admission.SEQUENCE_CLOSED
    held = keys.held_sequences("ending", "1.0", worker.worker_id or "")
    assert await client.scard(held) == 0
    assert await client.zcard(keys.live_sequences("ending", "1.0")) == 0
    # Started again explicitly, it is a new sequence from zero.
    admitted, again = await sequences.send("s", 3, start=True)
    assert admitted is Admission.ADMITTED
    assert result((await sequences.answers([again]))[0])["total"] == 3


async def test_an_idle_sequence_is_closed_and_let_go(start: Start, client: "aioredis.Redis") -> None:
    sequences, (worker,) = await start(
        models.stateful_model("idler"),
        1,
        sequence_max_idle_ms=300,
    )
    _, first = await sequences.send("s", 5)
    assert result((await sequences.answers([first]))[0])["total"] == 5
    held = keys.held_sequences("idler", "1.0", worker.worker_id or "")
    await eventually(lambda: _none(client.scard(held)), timeout_s=10)
    assert (await sequences.send("s", 1))[0] is Admission.SEQUENCE_CLOSED


async def test_max_num_sequence_refuses_one_more_live_sequence(start: Start) -> None:
    sequences, _ = await start(
        models.stateful_model("limited"),
        1,
        max_num_sequence=2,
        batch_size=1,
        max_workers=1,
    )
    outcomes = [(await sequences.send(sid, 1))[0] for sid in ("a", "b", "c")]
    assert outcomes[:2] == [Admission.ADMITTED, Admission.ADMITTED]
    assert outcomes[2] is Admission.SEQUENCE_LIMIT
    # Ending one makes room.
    _, ending = await sequences.send("a", 1, end=True)
    await sequences.answers([ending])
    assert (await sequences.send("c", 1))[0] is Admission.ADMITTED


async def _moved_after_kill(
    sequences: Sequences, started: list[WorkerProcess], sid: str
) -> tuple[list[dict[str, Any]], Reply]:
    """Run three steps of ``sid``, kill -9 its worker, send a fourth; the first three answers and the
    fourth reply."""
    ids = [(await sequences.send(sid, value))[1] for value in (1, 2, 3)]
    before = [result(reply) for reply in await sequences.answers(ids)]
    holder = next(w for w in started if w.pid == before[0]["pid"])
    holder.send(signal.SIGKILL)
    holder.wait()
    admitted, after = await sequences.send(sid, 4)
    assert admitted is Admission.ADMITTED
    return before, (await sequences.answers([after]))[0]


async def test_a_sequence_with_saved_state_survives_its_worker_killed(
    start: Start, client: "aioredis.Redis"
) -> None:
    sequences, started = await start(models.stateful_model("saver", save_state=True), 2)
    before, after = await _moved_after_kill(sequences, started, "s")
    assert [a["total"] for a in before] == [1, 3, 6]
    moved = result(after)
    assert moved["total"] == 10
    assert moved["pid"] != before[0]["pid"]
    # The dead holder's bookkeeping goes with it.
    dead = next(w.worker_id for w in started if w.pid == before[0]["pid"])
    assert dead is not None
    assert not await client.sismember(keys.sequence_holders("saver", "1.0"), dead)
    assert not await client.exists(keys.sequence_inbox("saver", "1.0", dead))


async def test_a_sequence_without_saved_state_fails_clearly_after_its_worker_is_killed(start: Start) -> None:
    sequences, started = await start(models.stateful_model("forgetful"), 2)
    _, after = await _moved_after_kill(sequences, started, "s")
    assert (after.error_code, after.message) == (ErrorCode.ABORTED.value, "sequence state lost: worker died")
    # The rest of that sequence fails the same way; a new sequence is served by the survivor.
    _, later = await sequences.send("s", 5)
    assert (await sequences.answers([later]))[0].error_code == ErrorCode.ABORTED.value
    _, fresh = await sequences.send("t", 7)
    assert result((await sequences.answers([fresh]))[0])["total"] == 7


async def test_a_job_running_when_its_worker_dies_runs_again_from_the_saved_state(start: Start) -> None:
    spec = models.stateful_model("slow-saver", save_state=True, sleep_s=1.0)
    sequences, started = await start(spec, 2)
    _, first = await sequences.send("s", 1)
    holder_pid = result((await sequences.answers([first]))[0])["pid"]
    _, second = await sequences.send("s", 2)
    await asyncio.sleep(0.5)  # the handler is sleeping on it
    holder = next(w for w in started if w.pid == holder_pid)
    holder.send(signal.SIGKILL)
    reply = (await sequences.answers([second]))[0]
    answer = result(reply)
    assert (answer["total"], reply.attempt) == (3, 2)
    assert answer["pid"] != holder_pid


async def test_an_oversized_state_fails_its_request_and_the_sequence_goes_on(
    start: Start, client: "aioredis.Redis"
) -> None:
    spec = models.stateful_model("bloated", save_state=True, state_bytes=2048)
    sequences, _ = await start(spec, 1, sequence_state_max_bytes=1024)
    _, first = await sequences.send("s", 1)
    reply = (await sequences.answers([first]))[0]
    assert reply.error_code == ErrorCode.HANDLER_FAILED.value
    assert "exceeds sequenceStateMaxBytes (1024)" in reply.message
    assert not await client.hexists(keys.sequence("bloated", "1.0", "s"), "state")
    _, second = await sequences.send("s", 2)
    assert (await sequences.answers([second]))[0].error_code == ErrorCode.HANDLER_FAILED.value


async def test_a_stopping_worker_hands_its_sequences_over_with_their_states(start: Start) -> None:
    spec = models.stateful_model("handover", save_state=True)
    sequences, started = await start(spec, 2)
    ids = {sid: (await sequences.send(sid, 10))[1] for sid in ("a", "b", "c", "d")}
    answers = {
        sid: result(reply)
        for sid, reply in zip(ids, await sequences.answers(list(ids.values())), strict=True)
    }
    leaving = started[0]
    leaving.send(signal.SIGTERM)
    assert leaving.wait() == 0, leaving.log()
    later = {sid: (await sequences.send(sid, 1))[1] for sid in ids}
    after = {
        sid: result(reply)
        for sid, reply in zip(later, await sequences.answers(list(later.values())), strict=True)
    }
    assert {sid: a["total"] for sid, a in after.items()} == dict.fromkeys(ids, 11)
    assert {a["pid"] for a in after.values()} == {started[1].pid}
    moved = [sid for sid in ids if answers[sid]["pid"] == leaving.pid]
    assert moved, "the stopped worker held none of the sequences"


async def test_a_stopping_worker_without_saved_states_serves_its_sequences_until_they_end(
    module_redis: RedisServer,
    client: "aioredis.Redis",
    admission: RedisJobAdmission,
    tmp_path: Path,
    workers: list[WorkerProcess],
) -> None:
    spec = models.stateful_model("drainer")
    record = await register(client, spec, tmp_path, **STATEFUL)
    worker = WorkerProcess(
        module_redis.url, "drainer", "1.0", tmp_path, env={"SLUICE_SEQUENCE_DRAIN_S": "30"}
    )
    workers.append(worker.start())
    worker.wait_ready()
    sequences = Sequences(admission, record, await ReplyStream(client).open())
    _, first = await sequences.send("s", 4)
    await sequences.answers([first])
    worker.send(signal.SIGTERM)
    record_key = keys.workers("drainer", "1.0")
    await eventually(lambda: _unloading(client, record_key), timeout_s=10)
    # No new sequence comes to it; the one it holds is still served, to its end.
    assert (await sequences.send("new", 1))[0] is Admission.NO_WORKER
    _, last = await sequences.send("s", 5, end=True)
    assert result((await sequences.answers([last]))[0])["total"] == 9
    assert worker.wait(timeout_s=10) == 0, worker.log()


async def _unloading(client: "aioredis.Redis", key: str) -> bool:
    return any(b'"UNLOADING"' in raw for raw in await client.hvals(key))
