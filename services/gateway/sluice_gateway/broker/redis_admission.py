"""Job admission on Redis (:class:`~.seam.JobAdmission`): a job enters its model version's job stream
in one atomic round trip, and cancel flags are keys the workers look up.

A job is admitted by the admission rule that every caller shares (:mod:`sluice.admission`), through
its script that checks the version and adds the entry, except a large one: a payload passed through
Lua costs Redis two more copies of it (a 588 KiB image: ~1.9 against ~0.9 CPU-ms per job), so a large
job is added by a plain ``XADD`` and checked right after it in the same ``MULTI``/``EXEC`` (the rule's
other script, which deletes a refused entry before any reader sees it). For small jobs the
transaction's extra commands cost more than the copies save. Both run on the gateway's pipelined
hot-path connection: the enqueues of all the calls that arrived in one event-loop turn reach Redis in
one write. EVALSHA falls back to EVAL after a Redis restart. A stateful model's jobs go through
``enqueue_sequence.lua`` (its sequence's stream, held by one worker).

With ``sluice_redis_wait_replicas`` set, an admitted job's call goes on once that many replicas hold
the job (:mod:`.replica_wait`): a failover then loses it only if it loses those replicas too
(docs/failover.md).
"""

import asyncio
import hashlib
from pathlib import Path
from typing import Any, cast

from sluice import admission
from sluice.admission import Outcome
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.errors import RedisError, ReplyError
from sluice.redis.link import RedisLink
from sluice.redis.resp import Arg
from sluice.registry.records import VersionRecord

from sluice_gateway.broker.replica_wait import ReplicaBarrier, ReplicaWait
from sluice_gateway.broker.seam import Admission, BrokerUnavailable, SequenceStep

log = get_logger(__name__)

_SEQUENCE_SCRIPT = Path(__file__).with_name("enqueue_sequence.lua").read_text()
_SEQUENCE_SCRIPT_SHA = hashlib.sha1(_SEQUENCE_SCRIPT.encode()).hexdigest()

# From this size on a job is added outside Lua: at 8 KiB the transaction already costs Redis less
# (0.064 against 0.075 CPU-ms per job, pipelined); at 400 bytes it costs more (0.04 against 0.03).
LARGE_JOB_BYTES = 8 * 1024

# The admission rule's outcomes as the data plane knows them.
_ADMISSIONS = {
    Outcome.ADMITTED: Admission.ADMITTED,
    Outcome.COLD: Admission.ADMITTED_COLD,
    Outcome.NOT_FOUND: Admission.VERSION_GONE,
    Outcome.NO_WORKER: Admission.NO_WORKER,
    Outcome.QUEUE_FULL: Admission.QUEUE_FULL,
}
OUTCOMES = {
    **{name: _ADMISSIONS[outcome] for name, outcome in admission.NAMED.items()},
    b"CLOSED": Admission.SEQUENCE_CLOSED,
    b"START_REQUIRED": Admission.SEQUENCE_START_REQUIRED,
    b"LIMIT": Admission.SEQUENCE_LIMIT,
}


def admission_of(outcome: object) -> Admission:
    """A script's answer: a named outcome, else (the new entry's id, ``ADMITTED``) admitted."""
    return OUTCOMES.get(outcome, Admission.ADMITTED) if isinstance(outcome, bytes) else Admission.ADMITTED


class RedisJobAdmission:
    def __init__(self, redis: RedisLink, replica_wait: ReplicaWait | None = None) -> None:
        self._redis = redis
        self._barrier = ReplicaBarrier(redis, replica_wait or ReplicaWait())
        # Fire-and-forget tasks are referenced until done (the loop keeps only weak references).
        self._background: set[asyncio.Task[None]] = set()

    async def enqueue(self, model: str, version: str, job: bytes) -> Admission:
        """Add ``job`` to the version's stream, or say why not; BrokerUnavailable when Redis does not
        answer (or answers with an error)."""
        script_keys = admission.script_keys(model, version)
        try:
            if len(job) >= LARGE_JOB_BYTES:
                outcome = await self._add_then_admit(script_keys, job)
            else:
                outcome = await self._redis.evalsha(
                    admission.ENQUEUE_SCRIPT_SHA,
                    admission.ENQUEUE_SCRIPT,
                    script_keys,
                    [job, keys.EVENTS_CHANNEL],
                )
        except ReplyError as exc:
            if str(exc).startswith("OOM"):  # maxmemory reached: as good as a full queue
                return Admission.QUEUE_FULL
            raise BrokerUnavailable(str(exc)) from exc
        except RedisError as exc:
            raise BrokerUnavailable(str(exc)) from exc
        return await self._replicated(admission_of(outcome))

    async def enqueue_sequence(self, record: VersionRecord, job: bytes, step: SequenceStep) -> Admission:
        """Add ``job`` to its sequence's stream (enqueue_sequence.lua), or say why not."""
        model, version, sequence_id = record.model_name, record.version, step.sequence_id
        script_keys = [
            keys.version_config(model, version),
            keys.workers(model, version),
            keys.sequence(model, version, sequence_id),
            keys.sequence_jobs(model, version, sequence_id),
            keys.live_sequences(model, version),
            keys.sequence_holders(model, version),
        ]
        start = "" if step.start is None else ("1" if step.start else "0")
        arguments: list[Arg] = [
            keys.version_prefix(model, version), job, sequence_id, start, "1" if step.end else "0",
            record.sequence_max_idle_ms, record.sequence_timeout_ms, record.live_sequence_limit,
            record.max_sequence_job_queue_size, keys.CLOSED_SEQUENCE_MEMORY_MS, keys.EVENTS_CHANNEL,
        ]  # fmt: skip
        try:
            outcome = await self._redis.evalsha(
                _SEQUENCE_SCRIPT_SHA, _SEQUENCE_SCRIPT, script_keys, arguments, payload=True
            )
        except ReplyError as exc:
            if str(exc).startswith("OOM"):
                return Admission.QUEUE_FULL
            raise BrokerUnavailable(str(exc)) from exc
        except RedisError as exc:
            raise BrokerUnavailable(str(exc)) from exc
        return await self._replicated(admission_of(outcome))

    async def _replicated(self, admission: Admission) -> Admission:
        """``admission``, once the replicas asked for hold an admitted job (:mod:`.replica_wait`)."""
        if self._barrier.enabled and admission in (Admission.ADMITTED, Admission.ADMITTED_COLD):
            await self._barrier.after_write()
        return admission

    async def _add_then_admit(self, script_keys: list[str], job: bytes) -> object:
        """``XADD`` then the rule's check of an added job in one transaction; the script's outcome."""
        send = self._redis.send
        replies = await asyncio.gather(
            send("MULTI"),
            send("XADD", script_keys[2], "*", "m", job, payload=True),
            send("EVAL", admission.ADMIT_ADDED_SCRIPT, len(script_keys), *script_keys, keys.EVENTS_CHANNEL),
            send("EXEC"),
            return_exceptions=True,
        )
        # The first error explains the rest (an XADD refused for memory aborts the EXEC).
        errors = [reply for reply in replies if isinstance(reply, BaseException)]
        if errors:
            raise errors[0]
        _added, outcome = cast(list[Any], replies[3])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def cancel(self, model: str, version: str, job_id: str, ttl_ms: int) -> None:
        """Flag the job as abandoned by its client, off the caller's path."""
        task = asyncio.create_task(self._set_cancel(keys.cancel(model, version, job_id), max(ttl_ms, 1)))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _set_cancel(self, key: str, ttl_ms: int) -> None:
        try:
            await self._redis.send("SET", key, b"1", "PX", ttl_ms)
        except RedisError as exc:
            log.info("cancel flag not set", key=key, error=str(exc))

    async def drain(self) -> None:
        """Wait for pending cancel flags (at shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
