"""The worker's :class:`~.source.JobSource` on Redis: the version's job stream read through its
consumer group (:mod:`.job_stream`) and the claim scan for dead workers' jobs (:mod:`.reclaim`).
Redis failures leave as :class:`~.source.BrokerUnavailable`."""

from collections.abc import Awaitable, Coroutine, Mapping, Sequence, Set
from typing import Any, TypeVar

from sluice_worker.broker.job_stream import JobQueue
from sluice_worker.broker.outbox import Command
from sluice_worker.broker.reclaim import Reclaimer
from sluice_worker.broker.retries import REDIS_FAILED
from sluice_worker.broker.source import BrokerUnavailable
from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing
from sluice_worker.sequence_state import NO_STATES, StateUpdate

T = TypeVar("T")


async def mapped(pending: Awaitable[T]) -> T:
    """``pending``'s result; a failed Redis command raises BrokerUnavailable instead."""
    try:
        return await pending
    except REDIS_FAILED as exc:
        raise BrokerUnavailable(str(exc)) from exc


class RedisJobSource:
    def __init__(self, stream: JobQueue, reclaimer: Reclaimer) -> None:
        self._stream = stream
        self._reclaimer = reclaimer

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        return await mapped(self._stream.read(count, block_ms))

    async def rescue(self, held: Set[bytes]) -> list[Delivery]:
        return await mapped(self._reclaimer.scan(held))

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        return await mapped(self._stream.cancelled(deliveries))

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        await mapped(self._stream.publish(outgoing))

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        *,
        batch_size: int = 0,
        states: Mapping[str, StateUpdate] = NO_STATES,
    ) -> Coroutine[Any, Any, None]:
        # Sent now (in this loop turn's write); only the answers are awaited later.
        sent = self._stream.finish(outgoing, [d.receipt for d in done], batch_size=batch_size)
        return mapped(sent)

    def finish_commands(self, outgoing: Sequence[Outgoing], done: Sequence[Delivery]) -> list[Command]:
        """What :meth:`finish` sends, as commands another client can run (see JobQueue.finish_commands)."""
        return self._stream.finish_commands(outgoing, [d.receipt for d in done])

    async def leave(self) -> None:
        await mapped(self._stream.outbox.flush())
        await mapped(self._reclaimer.reap(self._reclaimer.me))
