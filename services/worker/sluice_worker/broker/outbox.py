"""What a worker writes back on the hot connection, whichever stream its jobs came from: replies,
the batch-size histogram, dead letters, and the cancel-flag check. Each call queues commands now
(they leave in this loop turn's write) and returns their futures; :func:`settle` awaits them.

Batch sizes are counted here and written at most once per ``BATCH_SIZES_EVERY_S`` (a lone batch
after a quiet second is written with its replies at once; counts left over are written by a timer),
which spares every batch at C=1 an ``HINCRBY``: the histogram is scraped every few seconds anyway.
"""

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice import envelope
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.errors import RedisError, ReplyError
from sluice.redis.link import RedisLink
from sluice.redis.resp import Arg

from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing

log = get_logger(__name__)

# Dead letters kept per version (approximate trim): enough to inspect, bounded memory.
DEAD_LETTERS_MAXLEN = 1000
BATCH_SIZES_EVERY_S = 1.0

Fields = dict[bytes, bytes]
Command = tuple[Arg, ...]


@dataclass(frozen=True)
class DeadLetter:
    entry_id: bytes
    fields: Fields
    reason: str
    deliveries: int


class Outbox:
    def __init__(self, hot: RedisLink, model: str, version: str, worker_id: str) -> None:
        self._hot = hot
        self._model, self._version = model, version
        self._worker_id = worker_id
        self._dead_letters = keys.dead_letters(model, version)
        self._batch_sizes = keys.batch_sizes(model, version)
        # Handler calls by batch size, not yet written; when the next write may go out.
        self._sizes: Counter[int] = Counter()
        self._sizes_due_at = 0.0
        self._sizes_timer: asyncio.TimerHandle | None = None
        self._late_write: asyncio.Future[None] | None = None

    def replies(self, outgoing: Sequence[Outgoing]) -> "list[asyncio.Future[Any]]":
        """One XADD per reply stream: the replies bound for one gateway are fields of one entry, in
        order (a continuous-batching iteration's tokens cost one command per gateway, not one each).
        NOMKSTREAM: a gateway that went away does not get its reply stream recreated."""
        return [self._hot.send(*command, payload=True) for command in reply_commands(outgoing)]

    def batch_size(self, size: int) -> "list[asyncio.Future[Any]]":
        """Count one handler call of ``size`` jobs in the version's batch-size histogram (metrics):
        the counts so far when a write is due, else nothing yet (a timer writes them)."""
        self._sizes[size] += 1
        if time.monotonic() >= self._sizes_due_at:
            return self._write_sizes()
        if self._sizes_timer is None:
            delay_s = self._sizes_due_at - time.monotonic()
            self._sizes_timer = asyncio.get_running_loop().call_later(delay_s, self._write_late_sizes)
        return []

    async def flush(self) -> None:
        """Write the batch sizes counted and not yet written (the worker is stopping)."""
        await self._confirm_sizes(dict(self._sizes), self._write_sizes())

    def _write_sizes(self) -> "list[asyncio.Future[Any]]":
        if self._sizes_timer is not None:
            self._sizes_timer.cancel()
            self._sizes_timer = None
        sizes, self._sizes = self._sizes, Counter()
        self._sizes_due_at = time.monotonic() + BATCH_SIZES_EVERY_S
        return [
            self._hot.send("HINCRBY", self._batch_sizes, str(size), count) for size, count in sizes.items()
        ]

    async def _confirm_sizes(self, sizes: dict[int, int], sent: "list[asyncio.Future[Any]]") -> None:
        try:
            await settle(sent)
        except RedisError:
            self._sizes.update(sizes)  # written with the next ones
            raise

    def _write_late_sizes(self) -> None:
        self._sizes_timer = None
        self._late_write = asyncio.ensure_future(self._write_late(dict(self._sizes), self._write_sizes()))

    async def _write_late(self, sizes: dict[int, int], sent: "list[asyncio.Future[Any]]") -> None:
        try:
            await self._confirm_sizes(sizes, sent)
        except RedisError as exc:
            log.warning("batch sizes not written, will retry", error=str(exc))

    def dead_letter(self, letter: DeadLetter) -> "asyncio.Future[Any]":
        fields: list[Arg] = [value for pair in letter.fields.items() for value in pair]
        fields += ["reason", letter.reason, "deliveries", letter.deliveries, "by", self._worker_id]
        return self._hot.send("XADD", self._dead_letters, "MAXLEN", "~", DEAD_LETTERS_MAXLEN, "*", *fields)

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        """Send replies that finish no job (intermediate results)."""
        await settle(self.replies(outgoing))

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        """Whether each job's client gave up (its cancel flag exists): one ``MGET`` (the flags of a
        version share its hash tag, so one slot), however many jobs are looked at."""
        if not deliveries:
            return []
        flags: Any = await self._hot.send(
            "MGET", *(keys.cancel(self._model, self._version, delivery.job_id) for delivery in deliveries)
        )
        return [flag is not None for flag in flags]


def reply_commands(outgoing: Sequence[Outgoing]) -> list[Command]:
    """The XADDs that send ``outgoing``: one per reply stream (see :meth:`Outbox.replies`)."""
    by_stream: dict[str, list[Arg]] = {}
    for item in outgoing:
        by_stream.setdefault(item.reply_to, []).extend((envelope.FIELD, envelope.encode_reply(item.reply)))
    return [("XADD", reply_to, "NOMKSTREAM", "*", *fields) for reply_to, fields in by_stream.items()]


async def settle(sent: "list[asyncio.Future[Any]]") -> list[Any]:
    """Wait for the answers of commands already sent: a lost connection raises (the caller retries
    the whole step), an error reply is logged (its answer is None)."""
    down: RedisError | None = None
    answers: list[Any] = []
    for future in sent:
        try:
            answers.append(await future)
        except ReplyError as exc:
            log.error("reply or ack failed", error=str(exc))
            answers.append(None)
        except RedisError as exc:
            down = down or exc
            answers.append(None)
    if down is not None:
        raise down
    return answers
