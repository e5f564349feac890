"""The sequences one worker holds, as it keeps track of them (pure: no I/O).

A sequence is busy from the moment its next job is handed out until that job is finished: a
sequence runs one job at a time, in order. Idle sequences are read in turns, the one served longest
ago first, so that a batch with room for fewer sequences than are waiting treats them fairly.
"""

from collections import OrderedDict
from dataclasses import dataclass

from sluice_worker.delivery import SequenceTurn


@dataclass
class Held:
    # The state the handler saved, to load before the sequence's next job (it moved here).
    restore: bytes | None = None
    # Its state is gone (it moved here unsaved, or did not load): its jobs fail.
    lost: bool = False
    # The first unanswered job when the sequence moved here, and how many deliveries it has had.
    moved_head: bytes = b""
    moved_attempt: int = 1
    busy: bool = False


class Holdings:
    def __init__(self) -> None:
        self._held: OrderedDict[str, Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, sequence_id: str) -> bool:
        return sequence_id in self._held

    def add(self, sequence_id: str, held: Held | None = None) -> bool:
        """Hold a sequence (first in line); False when it was held already (nothing changes)."""
        if sequence_id in self._held:
            return False
        self._held[sequence_id] = held or Held()
        self._held.move_to_end(sequence_id, last=False)
        return True

    def drop(self, sequence_id: str) -> None:
        self._held.pop(sequence_id, None)

    def idle(self) -> list[str]:
        """Sequences without a job in hand, the one served longest ago first."""
        return [sequence_id for sequence_id, held in self._held.items() if not held.busy]

    def take(self, sequence_id: str, entry_id: bytes, *, starts: bool) -> tuple[SequenceTurn, int]:
        """Hand out the sequence's next job (entry ``entry_id``): its turn, and its delivery count.
        A job that starts the sequence again starts it from empty state."""
        held = self._held[sequence_id]
        held.busy = True
        self._held.move_to_end(sequence_id)
        if starts:
            held.restore, held.lost = None, False
        turn = SequenceTurn(sequence_id, restore=held.restore, lost=held.lost)
        held.restore = None
        attempt = held.moved_attempt if entry_id == held.moved_head else 1
        return turn, attempt

    def release(self, sequence_id: str, *, lost: bool = False) -> None:
        """The sequence's job is finished; ``lost``: its state could not be restored."""
        held = self._held.get(sequence_id)
        if held is not None:
            held.busy = False
            held.lost = held.lost or lost
