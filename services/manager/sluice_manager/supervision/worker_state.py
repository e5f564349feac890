"""What the reconciler reads and writes in Redis: registered versions, launch records, the workers'
own records and heartbeats, pending jobs per worker, and restart streaks. All of it lives in Redis so
that a restarted manager picks up where its predecessor stopped."""

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from sluice.log import get_logger
from sluice.redis import keys
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord, VersionState, WorkerRecord

from sluice_manager.supervision.autoscale import ScalingState, Signal
from sluice_manager.supervision.launchers.base import LaunchRecord

# The values that cross the seam (state_store) are defined there; imported from here too.
from sluice_manager.supervision.state_store import AnnouncedWorker as AnnouncedWorker
from sluice_manager.supervision.state_store import RegisteredVersion as RegisteredVersion
from sluice_manager.supervision.state_store import RestartStreak as RestartStreak
from sluice_manager.supervision.state_store import VersionKey as VersionKey

log = get_logger(__name__)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _launch(raw: bytes | str) -> LaunchRecord | None:
    try:
        return LaunchRecord.from_json(raw)
    except ValueError:
        log.warning("ignoring an unreadable launch record")
        return None


def _worker(raw: bytes | str) -> WorkerRecord | None:
    # One malformed record must not stop the reconciliation of every model.
    try:
        return WorkerRecord.from_json(raw)
    except ValueError:
        log.warning("ignoring an unreadable worker record")
        return None


def _version_field(model: str, version: str) -> str:
    # Names never contain ":" (sluice.registry.names), so the field splits back unambiguously.
    return f"{model}:{version}"


class WorkerStateStore:
    """The supervision state in Redis (:class:`~sluice_manager.supervision.state_store.SupervisionStore`),
    and what the management views read of it."""

    def __init__(self, redis: "aioredis.Redis") -> None:
        self.redis = redis

    async def registered_versions(self) -> dict[VersionKey, RegisteredVersion]:
        found: dict[VersionKey, RegisteredVersion] = {}
        raw_names = cast(list[bytes], await self.redis.zrange(keys.MODELS, 0, -1))
        for raw_name in raw_names:
            name = _text(raw_name)
            _, versions = await registry.model_versions(self.redis, name)
            for version in sorted(versions):
                raw_record, raw_state = await self.redis.hmget(
                    keys.version_config(name, version), [registry.RECORD_FIELD, "state"]
                )
                if raw_record is None:
                    continue
                active = raw_state is not None and _text(raw_state) == VersionState.ACTIVE.value
                found[(name, version)] = RegisteredVersion(VersionRecord.from_json(raw_record), active)
        return found

    async def launched(self) -> dict[str, LaunchRecord]:
        raw = await self.redis.hgetall(keys.LAUNCHED_WORKERS)
        return {_text(worker_id): record for worker_id, value in raw.items() if (record := _launch(value))}

    async def launched_one(self, worker_id: str) -> LaunchRecord | None:
        raw = await self.redis.hget(keys.LAUNCHED_WORKERS, worker_id)
        return None if raw is None else LaunchRecord.from_json(raw)

    async def put_launched(self, record: LaunchRecord) -> None:
        await self.redis.hset(keys.LAUNCHED_WORKERS, record.worker_id, record.to_json())

    async def forget_worker(self, model: str, version: str, worker_id: str) -> None:
        """Drop every trace of a worker that is gone. Deleting its heartbeat at once lets the other
        workers of the version claim its pending jobs without waiting for the TTL."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(keys.LAUNCHED_WORKERS, worker_id)
            pipe.hdel(keys.workers(model, version), worker_id)
            pipe.delete(keys.heartbeat(model, version, worker_id))
            await pipe.execute()

    async def announced(self, model: str, version: str) -> dict[str, AnnouncedWorker]:
        raw = await self.redis.hgetall(keys.workers(model, version))
        records = [record for value in raw.values() if (record := _worker(value))]
        if not records:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for record in records:
                pipe.exists(keys.heartbeat(model, version, record.worker_id))
            alive = await pipe.execute()
        return {
            record.worker_id: AnnouncedWorker(record, bool(is_alive))
            for record, is_alive in zip(records, alive, strict=True)
        }

    async def any_worker(self, model: str, version: str) -> bool:
        """Whether the version still has a worker: launched by a manager, or announced."""
        launched = await self.launched()
        if any((r.model_name, r.version) == (model, version) for r in launched.values()):
            return True
        return bool(await self.redis.hlen(keys.workers(model, version)))

    async def busy_workers(self, model: str, version: str, *, stateful: bool = False) -> set[str]:
        """Consumers of the version's job group that hold unacknowledged jobs; for a stateful
        version, the workers holding sequences."""
        if stateful:
            return await self._holders(model, version)
        try:
            summary = await self.redis.xpending(keys.job_stream(model, version), keys.JOB_GROUP)
        except ResponseError:  # no stream or group yet
            return set()
        return {_text(consumer["name"]) for consumer in summary.get("consumers") or [] if consumer["pending"]}

    async def restart_streak(self, model: str, version: str) -> RestartStreak:
        raw = await self.redis.hget(keys.RESTARTS, _version_field(model, version))
        return RestartStreak() if raw is None else RestartStreak.model_validate_json(raw)

    async def record_failure(self, model: str, version: str, log_path: str = "") -> RestartStreak:
        streak = await self.restart_streak(model, version)
        now_ms = int(time.time() * 1000)
        updated = RestartStreak(
            failures=streak.failures + 1,
            first_failure_unix_ms=streak.first_failure_unix_ms or now_ms,
            last_failure_unix_ms=now_ms,
            last_failure_log=log_path,
        )
        await self.redis.hset(keys.RESTARTS, _version_field(model, version), updated.model_dump_json())
        return updated

    async def next_worker_id(self) -> str:
        return await registry.next_worker_id(self.redis)

    async def signal(
        self,
        model: str,
        version: str,
        at_s: float,
        workers: Mapping[str, AnnouncedWorker],
        *,
        stateful: bool = False,
    ) -> Signal:
        """The version's load: jobs in its stream (acknowledged jobs are deleted), those delivered to
        a worker and not yet acknowledged, the age of the oldest (its entry id is its enqueue time in
        ms), all in one pipelined round trip; and how busy ``workers`` (:meth:`announced`) were, from
        the records their heartbeats refresh (``WorkerRecord.load_share``: for a generative model, the
        share of its slots taken counts; a worker whose heartbeat lapsed counts for none). A
        stateful version's jobs wait in their sequences' streams: its jobs are its live sequences
        (:meth:`_sequence_signal`)."""
        busy = sum(worker.record.load_share for worker in workers.values() if worker.heartbeat)
        if stateful:
            return await self._sequence_signal(model, version, at_s, busy)
        stream = keys.job_stream(model, version)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xlen(stream)
            pipe.xpending(stream, keys.JOB_GROUP)
            pipe.xrange(stream, "-", "+", count=1)
            length, pending, oldest = await pipe.execute(raise_on_error=False)
        jobs = length if isinstance(length, int) else 0
        in_flight = int(pending.get("pending") or 0) if isinstance(pending, dict) else 0
        age_s = 0.0
        if isinstance(oldest, list) and oldest:
            enqueued_ms = int(_text(oldest[0][0]).split("-", 1)[0])
            age_s = max(0.0, at_s - enqueued_ms / 1000)
        return Signal(
            at_s=at_s,
            queued=max(jobs - in_flight, 0),
            in_flight=min(in_flight, jobs),
            oldest_age_s=age_s,
            busy=busy,
        )

    async def _sequence_signal(self, model: str, version: str, at_s: float, busy: float) -> Signal:
        """Live sequences (not idle past their expiry): those no worker holds yet are queued, the
        others in flight (each holds its worker's attention until it ends or idles out)."""
        live_key = keys.live_sequences(model, version)
        now_ms = int(at_s * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcount(live_key, now_ms, "+inf")
            pipe.smembers(keys.held_sequences(model, version, ""))
            live, unassigned = await pipe.execute()
        waiting = 0
        if unassigned:
            # The set of unassigned sequences may still name some that idled out before a holder came.
            expiries = await self.redis.zmscore(live_key, list(unassigned))
            waiting = sum(1 for expiry in expiries if expiry is not None and expiry >= now_ms)
        return Signal(
            at_s=at_s,
            queued=waiting,
            in_flight=max(int(live) - waiting, 0),
            busy=busy,
            stateful=True,
        )

    async def _holders(self, model: str, version: str) -> set[str]:
        """The workers that hold at least one sequence of the version."""
        workers = [_text(w) for w in await self.redis.smembers(keys.sequence_holders(model, version))]
        workers = [worker for worker in workers if worker]  # "" stands for "no worker yet"
        if not workers:
            return set()
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker in workers:
                pipe.scard(keys.held_sequences(model, version, worker))
            held = await pipe.execute()
        return {worker for worker, count in zip(workers, held, strict=True) if count}

    async def scaling_state(self, model: str, version: str) -> ScalingState | None:
        raw = await self.redis.hget(keys.SCALING, _version_field(model, version))
        if raw is None:
            return None
        try:
            fields = json.loads(raw)
            known = {field.name for field in dataclasses.fields(ScalingState)}
            kept = {name: value for name, value in fields.items() if name in known}
            kept["recent"] = tuple((float(at), int(needed)) for at, needed in kept.get("recent", ()))
            return ScalingState(**kept)
        except (ValueError, TypeError, AttributeError):
            log.warning("ignoring an unreadable scaling state", model=model, version=version)
            return None

    async def put_scaling_state(self, model: str, version: str, state: ScalingState) -> None:
        await self.redis.hset(
            keys.SCALING, _version_field(model, version), json.dumps(dataclasses.asdict(state))
        )

    async def clear_scaling_state(self, model: str, version: str) -> None:
        await self.redis.hdel(keys.SCALING, _version_field(model, version))

    async def clear_streak(self, model: str, version: str) -> None:
        await self.redis.hdel(keys.RESTARTS, _version_field(model, version))
