"""What the worker loop needs of the broker, and nothing of how it does it: a :class:`JobSource`
that hands out jobs (new ones, and those of workers that died), says which ones their callers gave
up, takes their replies and their acknowledgements. The Redis implementation is
:mod:`.redis_source`; unit tests drive the loop with an in-memory one.

A broker that cannot be reached raises :class:`BrokerUnavailable`, never its client's own errors;
the loop waits it out.
"""

from collections.abc import Awaitable, Mapping, Sequence, Set
from typing import Protocol

from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing
from sluice_worker.sequence_state import NO_STATES, StateUpdate


class BrokerUnavailable(Exception):
    """The broker could not be reached or did not answer; retrying later may succeed."""


class JobSource(Protocol):
    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        """Up to ``count`` new jobs for this worker, waiting up to ``block_ms`` for the first (None:
        do not wait)."""
        ...

    async def rescue(self, held: Set[bytes]) -> list[Delivery]:
        """Jobs of dead workers of the version, taken over (a delivery more each), and this
        worker's own unfinished jobs that it does not hold (``held``: receipts in hand). Jobs past
        their deliveries are failed here instead."""
        ...

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        """Whether each job's caller gave up (one round trip)."""
        ...

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        """Send replies that finish no job (intermediate results)."""
        ...

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        *,
        batch_size: int = 0,
        states: Mapping[str, StateUpdate] = NO_STATES,
    ) -> Awaitable[None]:
        """Send the replies, then acknowledge ``done``, now (in one write with whatever the loop sends
        next); await the result to learn whether the broker took them. ``batch_size``: a handler call
        of that many jobs, for the batch-size metric; ``states``: what to record for the batch's
        sequences (stateful models)."""
        ...

    async def leave(self) -> None:
        """This worker is stopping: forget it as a consumer (its unfinished jobs stay for others)."""
        ...
