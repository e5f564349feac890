"""A worker's presence in Redis: its record in the version's ``workers`` hash and its heartbeat key.

The heartbeat is written first, so a record without a heartbeat always means a dead worker. Each beat
rewrites both: a worker whose record was removed while Redis was restarting (or by a peer that saw its
heartbeat lapse) announces itself again, and the record carries what the worker uses (memory, GPU)
as of the last beat.
"""

import asyncio
import dataclasses
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sluice.log import get_logger
from sluice.redis import keys
from sluice.registry.records import WorkerRecord, WorkerStatus

from sluice_worker.broker.outbox import Command

log = get_logger(__name__)

# After a failed beat the next one comes this soon: the heartbeat must be back as soon as Redis is,
# or peers may take this worker for dead and claim the jobs it holds.
RETRY_S = 0.1


class Presence:
    def __init__(
        self,
        redis: "aioredis.Redis",
        model: str,
        version: str,
        record: WorkerRecord,
        *,
        interval_s: float,
        ttl_ms: int,
        refresh: Callable[[WorkerRecord], WorkerRecord] = lambda record: record,
    ) -> None:
        self._redis = redis
        self._record = record
        # Fills in what the worker uses (memory, GPU) before each beat.
        self._refresh = refresh
        self._workers = keys.workers(model, version)
        self._heartbeat = keys.heartbeat(model, version, record.worker_id)
        self._interval_s = interval_s
        self._ttl_ms = ttl_ms
        self._stopping = asyncio.Event()

    async def announce(self) -> None:
        self._record = self._refresh(self._record)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(self._heartbeat, self._record.pid, px=self._ttl_ms)
            pipe.hset(self._workers, self._record.worker_id, self._record.to_json())
            await pipe.execute()

    def beat_commands(self) -> list[Command]:
        """The last announcement again, as commands for another client: what the inline runner's
        guard sends while a long handler call holds the loop (no refresh: that reads the loop's state)."""
        return [
            ("SET", self._heartbeat, self._record.pid, "PX", self._ttl_ms),
            ("HSET", self._workers, self._record.worker_id, self._record.to_json()),
        ]

    def withdraw_commands(self) -> list[Command]:
        """:meth:`withdraw` as commands for another client (the guard's, as the worker exits)."""
        return [("HDEL", self._workers, self._record.worker_id), ("DEL", self._heartbeat)]

    async def set_status(self, status: WorkerStatus) -> None:
        """Announce a new status now (UNLOADING: a stopping worker that still serves what it holds)."""
        self._record = dataclasses.replace(self._record, status=status)
        await self.announce()

    async def run(self) -> None:
        """Beat every ``interval_s`` until :meth:`stop`; a Redis outage is logged and waited out."""
        wait_s = self._interval_s
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), wait_s)
                return
            except TimeoutError:
                pass
            try:
                await self.announce()
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                log.warning("heartbeat failed, Redis unavailable", error=str(exc))
                wait_s = min(RETRY_S, self._interval_s)
            else:
                wait_s = self._interval_s

    def stop(self) -> None:
        """End :meth:`run` after the beat in progress (await its task before :meth:`withdraw`, so no
        late beat can announce the worker again)."""
        self._stopping.set()

    async def withdraw(self) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for command in self.withdraw_commands():
                pipe.execute_command(*command)
            await pipe.execute()
