"""Sequence state that survives a worker: Sluice's handler API for stateful models.

TorchServe's stateful handlers keep each sequence's state in the worker's memory, keyed by
``context.get_sequence_id(idx)``; when that worker dies the sequence is gone. A handler opts in to
more by defining two functions, on its handler object (a ``BaseHandler`` subclass) or at module
level (a function handler)::

    def save_sequence_state(sequence_id: str) -> bytes | None: ...
    def load_sequence_state(sequence_id: str, state: bytes) -> None: ...

After every batch the worker calls ``save_sequence_state`` for each sequence the batch held (on the
torch thread, right after the handler) and keeps the bytes in Redis beside the sequence, up to the
version's ``sequenceStateMaxBytes``; None means "nothing saved". When the sequence moves to another
worker (its worker died, or stopped), that worker calls ``load_sequence_state`` before the
sequence's next request. A sequence whose handler ran without a saved state cannot move: the rest of
it fails with "sequence state lost: worker died" (docs/design.md, "Sequences").
"""

import enum
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger

from sluice_worker.delivery import Delivery
from sluice_worker.replies import Outgoing, failure
from sluice_worker.torch_thread import TorchThread

log = get_logger(__name__)

SAVE_HOOK = "save_sequence_state"
LOAD_HOOK = "load_sequence_state"
SEQUENCE_LOST = SluiceError(ErrorCode.ABORTED, "sequence state lost: worker died")


@dataclass(frozen=True)
class StateHooks:
    save: Callable[[str], bytes | None]
    load: Callable[[str, bytes], None]


def find_hooks(entry_point: Callable[..., Any]) -> StateHooks | None:
    """The handler's save/load pair: on the object whose ``handle`` is the entry point, else in the
    module that defines it; None when the handler does not define both."""
    for owner in (getattr(entry_point, "__self__", None), inspect.getmodule(entry_point)):
        save, load = getattr(owner, SAVE_HOOK, None), getattr(owner, LOAD_HOOK, None)
        if callable(save) and callable(load):
            return StateHooks(save=save, load=load)
    return None


class StateChange(enum.Enum):
    SAVE = "save"
    # Drop the saved state: it no longer matches the handler's (saving failed or was declined).
    FORGET = "forget"
    # The state could not be restored: the rest of the sequence fails.
    LOSE = "lose"


@dataclass(frozen=True)
class StateUpdate:
    """What the broker records for a sequence when a batch finishes."""

    change: StateChange
    state: bytes = b""


NO_STATES: Mapping[str, StateUpdate] = MappingProxyType({})


def restore_all(hooks: StateHooks, restores: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    """Load saved states (on the torch thread); the failures, sequence id -> reason."""
    failed: dict[str, str] = {}
    for sequence_id, state in restores:
        try:
            hooks.load(sequence_id, state)
        except Exception as exc:
            log.exception("restoring a sequence's state failed", sequence_id=sequence_id)
            failed[sequence_id] = repr(exc)
    return failed


def save_all(hooks: StateHooks, sequence_ids: Iterable[str], max_bytes: int) -> dict[str, bytes | str]:
    """Each sequence's state to keep, or why there is none to keep (on the torch thread)."""
    saved: dict[str, bytes | str] = {}
    for sequence_id in sequence_ids:
        try:
            state = hooks.save(sequence_id)
        except Exception as exc:
            log.exception("saving a sequence's state failed", sequence_id=sequence_id)
            saved[sequence_id] = f"saving the sequence state failed: {exc!r}"
            continue
        if state is None:
            saved[sequence_id] = ""
        elif not isinstance(state, bytes | bytearray):
            saved[sequence_id] = f"{SAVE_HOOK} returned {type(state).__name__}, not bytes"
        elif len(state) > max_bytes:
            saved[sequence_id] = (
                f"sequence state of {len(state)} bytes exceeds sequenceStateMaxBytes ({max_bytes}); "
                "it was not saved"
            )
        else:
            saved[sequence_id] = bytes(state)
    return saved


class SequenceStates:
    """The worker loop's part in sequences: jobs of lost sequences fail, moved sequences get their
    state loaded before their job runs, and states are saved after each batch."""

    def __init__(self, hooks: StateHooks | None, max_bytes: int, torch: TorchThread) -> None:
        self._hooks = hooks
        self._max_bytes = max_bytes
        self._torch = torch

    @property
    def saves_state(self) -> bool:
        return self._hooks is not None

    async def restore(
        self, batch: list[Delivery], updates: dict[str, StateUpdate]
    ) -> tuple[list[Delivery], list[Outgoing]]:
        """Load the states of sequences that moved here; jobs of lost sequences (or whose state did not
        load: recorded in ``updates``) are answered with an error instead of run."""
        restores = [
            (d.sequence.sequence_id, d.sequence.restore)
            for d in batch
            if d.sequence is not None and d.sequence.restore is not None and not d.sequence.lost
        ]
        failed: dict[str, str] = {}
        if restores and self._hooks is not None:
            failed = await self._torch.run(restore_all, self._hooks, restores)
        keep: list[Delivery] = []
        outgoing: list[Outgoing] = []
        for delivery in batch:
            turn = delivery.sequence
            if turn is not None and (turn.lost or turn.sequence_id in failed):
                if turn.sequence_id in failed:
                    updates[turn.sequence_id] = StateUpdate(StateChange.LOSE)
                log.info("sequence state lost", request_id=delivery.job_id, sequence_id=turn.sequence_id)
                outgoing.append(failure(delivery, SEQUENCE_LOST))
            else:
                keep.append(delivery)
        return keep, outgoing

    async def save(
        self, ran: list[Delivery], outgoing: list[Outgoing], updates: dict[str, StateUpdate]
    ) -> list[Outgoing]:
        """Save the states of the sequences the batch ran (into ``updates``); a job whose sequence's
        state could not be saved gets that error instead of its answer."""
        if self._hooks is None:
            return outgoing
        sequence_ids = [d.sequence.sequence_id for d in ran if d.sequence is not None]
        if not sequence_ids:
            return outgoing
        saved = await self._torch.run(save_all, self._hooks, sequence_ids, self._max_bytes)
        refused: dict[str, SluiceError] = {}
        for sequence_id, result in saved.items():
            if isinstance(result, bytes):
                updates[sequence_id] = StateUpdate(StateChange.SAVE, result)
                continue
            updates[sequence_id] = StateUpdate(StateChange.FORGET)
            if result:
                refused[sequence_id] = SluiceError(ErrorCode.HANDLER_FAILED, result)
        if not refused:
            return outgoing
        failed_jobs = {
            d.job_id: refused[d.sequence.sequence_id]
            for d in ran
            if d.sequence is not None and d.sequence.sequence_id in refused
        }
        by_job = {d.job_id: d for d in ran}
        return [
            failure(
                by_job[item.reply.job_id],
                failed_jobs[item.reply.job_id],
                seq=item.reply.seq,
                started_unix_ms=item.reply.started_unix_ms,
            )
            if item.reply.final and item.reply.job_id in failed_jobs
            else item
            for item in outgoing
        ]
