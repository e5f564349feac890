"""Taking over the jobs of dead workers, and cleaning up after them.

A consumer of the version's group whose heartbeat key is gone is dead: its pending entries are
claimed (``XPENDING`` + ``XCLAIM``; a claim counts as a delivery) and run again here. A job past
``max_deliveries`` keeps killing workers: it is dead-lettered and its client gets "Worker died.".
Dead consumers without pending entries are deleted from the group, and their records from the
``workers`` hash, atomically with the heartbeat check (a script), so a worker that is merely slow
never loses entries.
"""

from collections.abc import Iterable, Mapping, Set

import redis.asyncio as aioredis
from sluice.log import get_logger
from sluice.redis import keys

from sluice_worker.broker.job_stream import JobQueue, PendingEntry, decode_entries
from sluice_worker.broker.outbox import DeadLetter, Fields
from sluice_worker.delivery import Delivery
from sluice_worker.replies import WORKER_DIED, Outgoing, failure

log = get_logger(__name__)

CLAIM_PAGE = 100

# KEYS: jobs stream, workers hash, the consumer's heartbeat key. ARGV: group, consumer.
# Returns 0 (alive: nothing done), 1 (record removed, consumer kept: it still has pending entries or
# there is no group) or 2 (record and consumer removed).
_REAP_SCRIPT = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[2])
local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if pending['err'] or #pending > 0 then return 1 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 2
"""


def dead_workers(known: Iterable[str], alive: Mapping[str, bool], me: str) -> list[str]:
    """Workers (consumers or recorded workers) other than ``me`` whose heartbeat is gone, sorted."""
    return sorted({worker for worker in known if worker != me and not alive.get(worker, False)})


def exhausted(deliveries: int, max_deliveries: int) -> bool:
    """A job delivered more than ``max_deliveries`` times is not run again."""
    return deliveries > max_deliveries


class Reclaimer:
    def __init__(
        self,
        redis: "aioredis.Redis",
        queue: JobQueue,
        model: str,
        version: str,
        *,
        max_deliveries: int,
        min_idle_ms: int,
    ) -> None:
        self._redis = redis
        self._queue = queue
        self._model, self._version = model, version
        self._workers = keys.workers(model, version)
        self._max_deliveries = max_deliveries
        self._min_idle_ms = min_idle_ms
        self._reap = redis.register_script(_REAP_SCRIPT)

    @property
    def me(self) -> str:
        return self._queue.consumer

    async def scan(self, held: Set[bytes] = frozenset()) -> list[Delivery]:
        """Claim the jobs of dead workers, and this consumer's own pending entries that it does not
        hold (``held``: entry ids in hand): leftovers of an earlier life under the same id, or entries
        whose XREADGROUP reply was lost in transit. Returns the jobs still worth running."""
        pending = await self._queue.consumers()
        recorded = {_text(worker) for worker in await self._redis.hkeys(self._workers)}
        candidates = sorted((set(pending) | recorded) - {self.me})
        alive = await self._alive(candidates)
        runnable: list[Delivery] = []
        if pending.get(self.me, 0) > len(held):
            runnable += await self._take_over(self.me, min_idle_ms=0, skip=held)
        for worker in dead_workers(candidates, alive, self.me):
            if pending.get(worker, 0) > 0:
                log.warning(
                    "taking over the jobs of a dead worker", dead_worker=worker, pending=pending[worker]
                )
                runnable += await self._take_over(worker, min_idle_ms=self._min_idle_ms)
            await self.reap(worker)
        return runnable

    async def reap(self, worker: str) -> int:
        """Remove ``worker``'s record, and its consumer if it holds no entries, unless it is alive."""
        heartbeat = keys.heartbeat(self._model, self._version, worker)
        result = await self._reap(
            keys=[self._queue.stream, self._workers, heartbeat], args=[keys.JOB_GROUP, worker]
        )
        return int(result)

    async def _alive(self, workers: list[str]) -> dict[str, bool]:
        if not workers:
            return {}
        async with self._redis.pipeline(transaction=False) as pipe:
            for worker in workers:
                pipe.exists(keys.heartbeat(self._model, self._version, worker))
            flags = await pipe.execute()
        return {worker: bool(flag) for worker, flag in zip(workers, flags, strict=True)}

    async def _take_over(
        self, worker: str, *, min_idle_ms: int, skip: Set[bytes] = frozenset()
    ) -> list[Delivery]:
        runnable: list[Delivery] = []
        start = "-"
        while True:
            page = await self._queue.pending(worker, CLAIM_PAGE, start=start)
            entries = [entry for entry in page if entry.entry_id not in skip]
            claimed = await self._queue.claim([entry.entry_id for entry in entries], min_idle_ms)
            runnable += await self._sort_out(entries, claimed)
            # Entries idle for less than min_idle_ms stay with their owner until the next scan.
            if len(page) < CLAIM_PAGE:
                return runnable
            start = "(" + page[-1].entry_id.decode()

    async def _sort_out(
        self, entries: list[PendingEntry], claimed: list[tuple[bytes, Fields | None]]
    ) -> list[Delivery]:
        # XCLAIM counted one more delivery for each entry it returned.
        counts = {entry.entry_id: entry.deliveries + 1 for entry in entries}
        fresh: list[tuple[bytes, Fields | None]] = []
        spent: list[tuple[bytes, Fields | None]] = []
        for entry_id, fields in claimed:
            (spent if exhausted(counts[entry_id], self._max_deliveries) else fresh).append((entry_id, fields))
        if spent:
            await self._dead_letter(spent, counts)
        return await self._queue.accept(fresh, counts)

    async def _dead_letter(self, spent: list[tuple[bytes, Fields | None]], counts: dict[bytes, int]) -> None:
        deliveries, _undecodable = decode_entries(spent, counts)
        outgoing: list[Outgoing] = [failure(delivery, WORKER_DIED) for delivery in deliveries]
        letters = [
            DeadLetter(entry_id, fields or {}, "max deliveries exceeded", counts[entry_id])
            for entry_id, fields in spent
        ]
        for delivery in deliveries:
            log.error(
                "job exceeded its deliveries, dead-lettered",
                request_id=delivery.job_id,
                deliveries=delivery.attempt,
                max_deliveries=self._max_deliveries,
            )
        await self._queue.finish(outgoing, [entry_id for entry_id, _ in spent], dead_letters=letters)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
