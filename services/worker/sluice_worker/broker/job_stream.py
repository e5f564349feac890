"""The job stream of one model version, seen by one consumer: reading, replying, acking, claiming.

Replies go out before the ack, in the same pipeline (at-least-once: a crash between them means a
redelivery and a duplicate the gateway drops, never a lost answer); on a Redis Cluster the ack
follows once the replies are written. An acked job is also deleted,
so ``XLEN`` stays "queued + in flight" for the gateway's admission check.

The hot path (read, cancel check, replies, ack) runs on one pipelined connection: what the worker
sends in one event-loop turn — a batch's replies and ack, then the next read — is one write. The
claim scan and group bookkeeping use redis-py.
"""

import asyncio
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from sluice import envelope
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.errors import ReplyError
from sluice.redis.link import RedisLink
from sluice.redis.resp import Arg

from sluice_worker.broker.outbox import Command, DeadLetter, Fields, Outbox, reply_commands, settle
from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing

log = get_logger(__name__)


@dataclass(frozen=True)
class PendingEntry:
    entry_id: bytes
    consumer: str
    idle_ms: int
    deliveries: int


class JobQueue:
    def __init__(
        self, redis: "aioredis.Redis", hot: RedisLink, model: str, version: str, consumer: str
    ) -> None:
        self._redis = redis
        # Its reply timeout must exceed the longest BLOCK of a read.
        self._hot = hot
        self.stream = keys.job_stream(model, version)
        self.consumer = consumer
        self.outbox = Outbox(hot, model, version, consumer)

    async def ensure_group(self) -> None:
        """Create the consumer group (and the stream) unless it exists. From the stream's first
        entry: entries of a stream without a group were never delivered (jobs admitted while a
        version that scales from zero ran no worker, or a group Redis lost)."""
        try:
            await self._redis.xgroup_create(self.stream, keys.JOB_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        """New jobs for this consumer (first deliveries), blocking up to ``block_ms`` (None: do not
        block). Undecodable entries are dead-lettered."""
        command: list[Arg] = ["XREADGROUP", "GROUP", keys.JOB_GROUP, self.consumer, "COUNT", count]
        if block_ms is not None:
            command += ["BLOCK", block_ms]
        try:
            response: Any = await self._hot.send(*command, "STREAMS", self.stream, ">")
        except ReplyError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # Redis lost the stream (restart without persistence, or someone deleted it). Every entry
            # of a group-less stream is undelivered, so the new group starts from the beginning.
            log.warning("consumer group missing, recreating it", stream=self.stream)
            await self.ensure_group()
            return []
        entries = [
            (entry_id, _fields(fields))
            for _stream, stream_entries in response or ()
            for entry_id, fields in stream_entries
        ]
        return await self.accept(entries, deliveries={})

    async def accept(
        self, entries: Iterable[tuple[bytes, Fields | None]], deliveries: Mapping[bytes, int]
    ) -> list[Delivery]:
        """Decode stream entries into deliveries; undecodable ones are dead-lettered and acked."""
        accepted, poison = decode_entries(entries, deliveries)
        if poison:
            await self.finish([], [p.entry_id for p in poison], dead_letters=poison)
        return accepted

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        return await self.outbox.cancelled(deliveries)

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        await self.outbox.publish(outgoing)

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        entry_ids: Sequence[bytes],
        dead_letters: Sequence[DeadLetter] = (),
        *,
        batch_size: int = 0,
    ) -> Awaitable[None]:
        """Send the replies, dead-letter, then ack and delete the entries, all in this loop turn's
        write; await the result to learn whether Redis took them (a lost connection raises; other
        errors are logged). A handler call of ``batch_size`` jobs is counted in the version's
        batch-size histogram (metrics)."""
        sent = self.outbox.replies(outgoing)
        if batch_size:
            sent += self.outbox.batch_size(batch_size)
        sent += [self.outbox.dead_letter(letter) for letter in dead_letters]
        if not self._hot.ordered:
            # A Cluster: the replies go to other masters than the job stream's, so the ack waits
            # until they are written (else a master lost meanwhile would take answered-looking jobs
            # with it).
            return self._ack_after(sent, entry_ids)
        sent += [self._hot.send(*command) for command in self.ack_commands(entry_ids)]
        return _settled(sent)

    async def _ack_after(self, sent: "list[asyncio.Future[Any]]", entry_ids: Sequence[bytes]) -> None:
        await settle(sent)
        await settle([self._hot.send(*command) for command in self.ack_commands(entry_ids)])

    def ack_commands(self, entry_ids: Sequence[bytes]) -> list[Command]:
        """Acknowledge and delete the entries (none: no command)."""
        if not entry_ids:
            return []
        return [("XACK", self.stream, keys.JOB_GROUP, *entry_ids), ("XDEL", self.stream, *entry_ids)]

    def finish_commands(self, outgoing: Sequence[Outgoing], entry_ids: Sequence[bytes]) -> list[Command]:
        """What :meth:`finish` sends for ``outgoing`` and ``entry_ids``, as commands for another
        client to run (the inline runner's guard thread, when the loop's thread is stuck in a
        handler)."""
        return [*reply_commands(outgoing), *self.ack_commands(entry_ids)]

    async def consumers(self) -> dict[str, int]:
        """Consumer name -> pending entries, for every consumer of the group."""
        try:
            infos: Any = await self._redis.xinfo_consumers(self.stream, keys.JOB_GROUP)
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc).lower():
                return {}
            raise
        return {_text(info["name"]): int(info["pending"]) for info in infos}

    async def pending(self, consumer: str, count: int, start: str = "-") -> list[PendingEntry]:
        """Up to ``count`` of ``consumer``'s pending entries from ``start`` ("(<id>" excludes <id>)."""
        rows: Any = await self._redis.xpending_range(self.stream, keys.JOB_GROUP, start, "+", count, consumer)
        return [
            PendingEntry(
                entry_id=row["message_id"],
                consumer=_text(row["consumer"]),
                idle_ms=int(row["time_since_delivered"]),
                deliveries=int(row["times_delivered"]),
            )
            for row in rows
        ]

    async def claim(self, entry_ids: Sequence[bytes], min_idle_ms: int) -> list[tuple[bytes, Fields | None]]:
        """Take entries over (each claim counts as a delivery). Entries deleted from the stream meanwhile
        are dropped from the pending list by Redis and not returned."""
        if not entry_ids:
            return []
        claimed: Any = await self._redis.xclaim(
            self.stream, keys.JOB_GROUP, self.consumer, min_idle_ms, list(entry_ids)
        )
        return [(entry_id, fields) for entry_id, fields in claimed]


def decode_entries(
    entries: Iterable[tuple[bytes, Fields | None]], deliveries: Mapping[bytes, int]
) -> tuple[list[Delivery], list[DeadLetter]]:
    """Stream entries as deliveries (``deliveries``: count per entry id, default 1), and the entries
    that hold no valid job."""
    accepted: list[Delivery] = []
    poison: list[DeadLetter] = []
    for entry_id, fields in entries:
        count = deliveries.get(entry_id, 1)
        try:
            job, request = envelope.decode_job_split((fields or {}).get(envelope.FIELD, b""))
        except envelope.EnvelopeError as exc:
            log.error("dropping undecodable job entry", entry_id=entry_id.decode(), error=str(exc))
            poison.append(DeadLetter(entry_id, fields or {}, "undecodable", count))
            continue
        accepted.append(Delivery(receipt=entry_id, job=job, attempt=count, request=request))
    return accepted, poison


async def _settled(sent: "list[asyncio.Future[Any]]") -> None:
    await settle(sent)


def _fields(flat: list[bytes] | None) -> Fields | None:
    """A raw ``[field, value, ...]`` entry as a mapping (None: the entry was deleted meanwhile)."""
    return None if flat is None else dict(zip(flat[::2], flat[1::2], strict=True))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
