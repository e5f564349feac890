"""The worker's :class:`~sluice_worker.broker.source.JobSource` for a stateful version.

The gateway puts each sequence's jobs on the sequence's own stream and gives a new sequence to one
worker (its hash's ``holder``), telling it on its inbox stream (gateway/broker/enqueue_sequence.lua).
This worker reads, in one ``XREAD``: its inbox, the unassigned inbox (sequences no worker holds:
handed over by a stopping worker, or admitted while none ran), and the head of every sequence it
holds that has no job in hand. A job leaves its stream only once answered (finish.lua), so whoever
holds the sequence next finds the unanswered ones, in order.

The claim scan (:meth:`SequenceJobSource.rescue`) takes over the sequences of dead workers with their
saved states (takeover.lua) and lets go of closed ones (sweep.lua); a stopping worker hands its
sequences over (handover.lua). Redis failures leave as :class:`BrokerUnavailable`.
"""

import asyncio
from collections.abc import Awaitable, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from sluice import envelope
from sluice.envelope import EnvelopeError
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.link import RedisLink
from sluice.redis.resp import Arg
from sluice.registry.records import VersionRecord

from sluice_worker.broker.outbox import DeadLetter, Outbox, settle
from sluice_worker.broker.redis_source import mapped
from sluice_worker.broker.sequences.holdings import Held, Holdings
from sluice_worker.delivery import Delivery
from sluice_worker.replies import WORKER_DIED, Outgoing, failure
from sluice_worker.sequence_state import NO_STATES, StateChange, StateUpdate

log = get_logger(__name__)

_HERE = Path(__file__).parent
_FINISH = (_HERE / "finish.lua").read_text()
_TAKEOVER = (_HERE / "takeover.lua").read_text()
_SWEEP = (_HERE / "sweep.lua").read_text()
_HANDOVER = (_HERE / "handover.lua").read_text()
# A dead worker's entry in the holders set, and its inbox, go once it holds nothing.
_FORGET_HOLDER = """
if redis.call('SCARD', KEYS[1]) > 0 then return 0 end
redis.call('DEL', KEYS[3])
return redis.call('SREM', KEYS[2], ARGV[1])
"""
# Inbox entries read per stream and read (the sequences' streams only ever give their first entry).
INBOX_PAGE = 64
UNASSIGNED = ""
_CHANGES = {StateChange.SAVE: "save", StateChange.FORGET: "forget", StateChange.LOSE: "lose"}


class SequenceJobSource:
    def __init__(
        self,
        redis: "aioredis.Redis",
        hot: RedisLink,
        record: VersionRecord,
        worker_id: str,
    ) -> None:
        self._redis = redis
        self._hot = hot
        self._model, self._version = model, version = record.model_name, record.version
        self._me = worker_id
        self._idle_ms = record.sequence_max_idle_ms
        self._max_deliveries = record.max_deliveries
        self._prefix = keys.version_prefix(model, version)
        self._outbox = Outbox(hot, model, version, worker_id)
        self._inbox = keys.sequence_inbox(model, version, worker_id)
        self._unassigned_inbox = keys.sequence_inbox(model, version, UNASSIGNED)
        self._held_key = keys.held_sequences(model, version, worker_id)
        self._live = keys.live_sequences(model, version)
        self._holders = keys.sequence_holders(model, version)
        self._holdings = Holdings()
        # Where this worker's reads of the two inboxes stand ("$" until start() looks).
        self._cursors = {self._inbox: b"$", self._unassigned_inbox: b"$"}
        self._draining = False
        # Set whenever the last held sequence is let go (a draining worker waits for it).
        self._none_held = asyncio.Event()
        self._takeover = redis.register_script(_TAKEOVER)
        self._sweep = redis.register_script(_SWEEP)
        self._handover = redis.register_script(_HANDOVER)
        self._forget_holder = redis.register_script(_FORGET_HOLDER)

    @property
    def holding(self) -> int:
        """How many sequences this worker holds."""
        return len(self._holdings)

    async def start(self) -> None:
        """Start reading both inboxes after what they hold now (the first :meth:`rescue` takes over
        whatever an earlier life of this worker id held, and the unassigned sequences)."""
        for inbox in self._cursors:
            last: Any = await self._redis.xrevrange(inbox, count=1)
            self._cursors[inbox] = last[0][0] if last else b"0-0"

    def drain(self) -> None:
        """The worker is stopping: take no more sequences over (those it holds are still served)."""
        self._draining = True

    async def none_held(self) -> None:
        """Return once this worker holds no sequence."""
        if self._holdings:
            self._none_held.clear()
            await self._none_held.wait()

    def _let_go(self, sid: str) -> None:
        self._holdings.drop(sid)
        if not self._holdings:
            self._none_held.set()

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        return await mapped(self._read(count, block_ms))

    async def _read(self, count: int, block_ms: int | None) -> list[Delivery]:
        idle = self._holdings.idle()
        got = await self._xread(idle, block_ms, with_inboxes=True)
        heads: dict[str, tuple[bytes, dict[bytes, bytes]]] = {}
        fresh: list[str] = []
        for stream, entries in got:
            if stream == self._inbox:
                fresh += [sid for sid in self._announced(stream, entries) if self._holdings.add(sid)]
            elif stream == self._unassigned_inbox:
                for sid in self._announced(stream, entries):
                    if not self._draining:
                        await self._take_over(sid, UNASSIGNED)
            elif entries:
                entry_id, fields = entries[0]
                heads[_sequence_of(stream, self._prefix)] = (entry_id, fields)
        if fresh and len(heads) < count:
            # Sequences just given to this worker: their first jobs are already queued.
            for stream, entries in await self._xread(fresh, None, with_inboxes=False):
                if entries:
                    heads[_sequence_of(stream, self._prefix)] = entries[0]
        return await self._deliver(list(heads.items())[:count])

    async def _xread(
        self, sequence_ids: list[str], block_ms: int | None, *, with_inboxes: bool
    ) -> list[tuple[str, list[tuple[bytes, dict[bytes, bytes]]]]]:
        streams = [keys.sequence_jobs(self._model, self._version, sid) for sid in sequence_ids]
        positions: list[Arg] = [b"0-0"] * len(streams)
        if with_inboxes:
            streams = [*self._cursors, *streams]
            positions = [*self._cursors.values(), *positions]
        if not streams:
            return []
        command: list[Arg] = ["XREAD", "COUNT", INBOX_PAGE]
        if block_ms is not None:
            command += ["BLOCK", block_ms]
        response: Any = await self._hot.send(*command, "STREAMS", *streams, *positions)
        return [
            (stream.decode(), [(entry_id, _fields(flat)) for entry_id, flat in entries])
            for stream, entries in response or ()
        ]

    def _announced(self, inbox: str, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[str]:
        self._cursors[inbox] = entries[-1][0]
        return [fields[b"s"].decode() for _entry_id, fields in entries if b"s" in fields]

    async def _deliver(self, heads: list[tuple[str, tuple[bytes, dict[bytes, bytes]]]]) -> list[Delivery]:
        deliveries: list[Delivery] = []
        for sid, (entry_id, fields) in heads:
            try:
                job = envelope.decode_job(fields.get(envelope.FIELD, b""))
            except EnvelopeError as exc:
                log.error("dropping undecodable job entry", sequence_id=sid, error=str(exc))
                await self._drop_entry(sid, entry_id, fields)
                continue
            turn, attempt = self._holdings.take(sid, entry_id, starts=job.sequence_start)
            delivery = Delivery(entry_id + b"\n" + sid.encode(), job, attempt, turn)
            if attempt > self._max_deliveries:
                log.error(
                    "job exceeded its deliveries, dead-lettered",
                    request_id=job.job_id,
                    deliveries=attempt,
                    max_deliveries=self._max_deliveries,
                )
                letter = DeadLetter(entry_id, fields, "max deliveries exceeded", attempt)
                await settle([self._outbox.dead_letter(letter)])
                await self._finish([failure(delivery, WORKER_DIED)], [delivery], NO_STATES, 0)
                continue
            deliveries.append(delivery)
        return deliveries

    async def _drop_entry(self, sid: str, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        """Dead-letter an entry that holds no valid job; the sequence goes on with its next one."""
        stream = keys.sequence_jobs(self._model, self._version, sid)
        letter = DeadLetter(entry_id, fields, "undecodable", 1)
        await settle([self._outbox.dead_letter(letter), self._hot.send("XDEL", stream, entry_id)])

    async def rescue(self, held: Set[bytes]) -> list[Delivery]:
        """Take over the sequences of dead workers and unassigned ones (unless draining), pick up
        sequences held under this worker's id that it does not know (an earlier life), and let go
        of closed ones. Their jobs come through :meth:`read`; nothing is returned here."""
        await mapped(self._rescue())
        return []

    async def _rescue(self) -> None:
        if not self._draining:
            holders = sorted(_text(w) for w in await self._redis.smembers(self._holders))
            others = [w for w in holders if w not in (UNASSIGNED, self._me)]
            async with self._redis.pipeline(transaction=False) as pipe:
                for worker in others:
                    pipe.exists(keys.heartbeat(self._model, self._version, worker))
                alive = await pipe.execute()
            dead = [w for w, up in zip(others, alive, strict=True) if not up]
            for worker in [*dead, UNASSIGNED, self._me]:
                await self._take_over_all(worker)
        released = await self._sweep(
            keys=[self._held_key, self._live], args=[self._prefix, self._me, self._idle_ms]
        )
        for sid in released:
            self._let_go(_text(sid))

    async def _take_over_all(self, worker: str) -> None:
        held_key = keys.held_sequences(self._model, self._version, worker)
        sequences = sorted(_text(s) for s in await self._redis.smembers(held_key))
        if worker not in (UNASSIGNED, self._me) and sequences:
            log.warning(
                "taking over the sequences of a dead worker", dead_worker=worker, sequences=len(sequences)
            )
        for sid in sequences:
            if worker != self._me or sid not in self._holdings:
                await self._take_over(sid, worker)
        if worker not in (UNASSIGNED, self._me):
            inbox = keys.sequence_inbox(self._model, self._version, worker)
            await self._forget_holder(keys=[held_key, self._holders, inbox], args=[worker])

    async def _take_over(self, sid: str, worker: str) -> None:
        script_keys = [
            keys.sequence(self._model, self._version, sid),
            keys.sequence_jobs(self._model, self._version, sid),
            keys.held_sequences(self._model, self._version, worker),
            self._held_key,
            self._holders,
            self._live,
        ]
        taken: Any = await self._takeover(keys=script_keys, args=[worker, self._me, sid])
        if taken is None:
            return
        lost, has_state, state, attempt, head = taken
        held = Held(
            restore=bytes(state) if has_state and not lost else None,
            lost=bool(lost),
            moved_head=head,
            moved_attempt=int(attempt),
        )
        self._holdings.drop(sid)
        self._holdings.add(sid, held)
        log.info("sequence taken over", sequence_id=sid, from_worker=worker or None, state_lost=bool(lost))

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        return await mapped(self._outbox.cancelled(deliveries))

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        await mapped(self._outbox.publish(outgoing))

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        *,
        batch_size: int = 0,
        states: Mapping[str, StateUpdate] = NO_STATES,
    ) -> Awaitable[None]:
        # Sent now (in this loop turn's write), before the next read: that read finds the next job.
        return mapped(self._finish(outgoing, done, states, batch_size))

    def _finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        states: Mapping[str, StateUpdate],
        batch_size: int,
    ) -> Awaitable[None]:
        sent = self._outbox.replies(outgoing)
        if batch_size:
            sent += self._outbox.batch_size(batch_size)
        finishing: list[str] = []
        for delivery in done:
            turn = delivery.sequence
            if turn is None:
                continue
            sid = turn.sequence_id
            update = states.get(sid)
            self._holdings.release(sid, lost=update is not None and update.change is StateChange.LOSE)
            change, state = ("", b"") if update is None else (_CHANGES[update.change], update.state)
            script_keys = [
                keys.sequence(self._model, self._version, sid),
                keys.sequence_jobs(self._model, self._version, sid),
                self._live,
                self._held_key,
            ]
            arguments: list[Arg] = [
                self._me, delivery.receipt.split(b"\n", 1)[0], sid, change, state,
                self._idle_ms, keys.CLOSED_SEQUENCE_MEMORY_MS,
            ]  # fmt: skip
            # EVAL, not EVALSHA: a NOSCRIPT answer would come after the next read went out, and
            # that read would hand out the same job again.
            sent.append(self._hot.send("EVAL", _FINISH, len(script_keys), *script_keys, *arguments))
            finishing.append(sid)
        return self._settle_finish(sent, finishing)

    async def _settle_finish(self, sent: list[Any], finishing: list[str]) -> None:
        answers = await settle(sent)
        for sid, answer in zip(finishing, answers[len(answers) - len(finishing) :], strict=True):
            if answer in (b"CLOSED", b"MOVED"):
                self._let_go(sid)

    async def leave(self) -> None:
        """Hand the sequences still held over to the version's other workers."""
        await mapped(self._outbox.flush())
        count = await mapped(
            self._handover(
                keys=[
                    self._held_key,
                    keys.held_sequences(self._model, self._version, UNASSIGNED),
                    self._holders,
                    self._unassigned_inbox,
                ],
                args=[self._prefix, self._me],
            )
        )
        if count:
            log.info("sequences handed over", sequences=int(count))


def _sequence_of(stream: str, prefix: str) -> str:
    return stream.removeprefix(f"{prefix}:sequence-jobs:")


def _fields(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
