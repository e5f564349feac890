"""What a worker writes back on the hot connection, whichever stream its jobs came from: replies,
the batch-size histogram, dead letters, and the cancel-flag check. Each call queues commands now
(they leave in this loop turn's write) and returns their futures; :func:`settle` awaits them."""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice import envelope, keys
from sluice.log import get_logger
from sluice.pipelined_redis import Arg, PipelinedRedis
from sluice.redis_errors import RedisError, ReplyError

from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing

log = get_logger(__name__)

# Dead letters kept per version (approximate trim): enough to inspect, bounded memory.
DEAD_LETTERS_MAXLEN = 1000

Fields = dict[bytes, bytes]


@dataclass(frozen=True)
class DeadLetter:
    entry_id: bytes
    fields: Fields
    reason: str
    deliveries: int


class Outbox:
    def __init__(self, hot: PipelinedRedis, model: str, version: str, worker_id: str) -> None:
        self._hot = hot
        self._model, self._version = model, version
        self._worker_id = worker_id
        self._dead_letters = keys.dead_letters(model, version)
        self._batch_sizes = keys.batch_sizes(model, version)

    def replies(self, outgoing: Sequence[Outgoing]) -> "list[asyncio.Future[Any]]":
        # NOMKSTREAM: a gateway that went away does not get its reply stream recreated.
        return [
            self._hot.send(
                "XADD", item.reply_to, "NOMKSTREAM", "*", envelope.FIELD, envelope.encode_reply(item.reply)
            )
            for item in outgoing
        ]

    def batch_size(self, size: int) -> "asyncio.Future[Any]":
        """Count one handler call of ``size`` jobs in the version's batch-size histogram (metrics)."""
        return self._hot.send("HINCRBY", self._batch_sizes, str(size), 1)

    def dead_letter(self, letter: DeadLetter) -> "asyncio.Future[Any]":
        fields: list[Arg] = [value for pair in letter.fields.items() for value in pair]
        fields += ["reason", letter.reason, "deliveries", letter.deliveries, "by", self._worker_id]
        return self._hot.send("XADD", self._dead_letters, "MAXLEN", "~", DEAD_LETTERS_MAXLEN, "*", *fields)

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        """Send replies that finish no job (intermediate results)."""
        await settle(self.replies(outgoing))

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        """Whether each job's client gave up (its cancel flag exists): one pipelined round trip."""
        sent = [
            self._hot.send("EXISTS", keys.cancel(self._model, self._version, delivery.job_id))
            for delivery in deliveries
        ]
        return [bool(flag) for flag in await asyncio.gather(*sent)]


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
