"""How many workers a version should run, between its ``minWorkers`` and ``maxWorkers``, from the
jobs waiting for it: a pure function of the version's settings, its scaling state so far and the
latest signal (unit-tested with tables and simulated clocks, as Ray Serve tests its policy).

The signal is what Redis holds for the version (sluice_manager.supervision.scaling_signal): jobs
queued and in flight, and the age of the oldest. ``needed`` = jobs / ``target_jobs_per_worker``,
rounded up.

- Up: ``needed`` above the current count for ``up_after_s`` (a sustained backlog, not a blip) moves
  to ``needed`` at once. From zero workers, any job moves to one at once: a request is waiting.
- Down: ``needed`` below the current count for ``down_after_s`` moves down to the highest ``needed``
  seen over that window, so a load that oscillates around a threshold does not thrash.
- Between two changes at least ``cooldown_s`` pass (except from zero). Never below ``min_workers``,
  never above ``max_workers`` nor what the host can hold. A stopped worker drains first (the
  reconciler stops the idle ones, gracefully).
"""

import math
from dataclasses import dataclass, replace

from sluice.records import VersionRecord


@dataclass(frozen=True)
class ScalingSettings:
    min_workers: int
    max_workers: int
    # Jobs (queued + in flight) one worker is meant to carry.
    target_jobs_per_worker: float = 2.0
    up_after_s: float = 2.0
    down_after_s: float = 60.0
    cooldown_s: float = 10.0

    @property
    def autoscaled(self) -> bool:
        return self.max_workers > self.min_workers


@dataclass(frozen=True)
class Signal:
    """A version's load as Redis shows it at ``at_s``."""

    at_s: float
    queued: int
    in_flight: int
    oldest_age_s: float = 0.0

    @property
    def jobs(self) -> int:
        return self.queued + self.in_flight


@dataclass(frozen=True)
class ScalingState:
    """What the policy remembers between passes (kept in Redis, so a restarted manager resumes)."""

    desired: int
    # When ``desired`` last changed (None: never, so no cooldown holds the first change back).
    changed_at_s: float | None = None
    # Since when ``needed`` has stayed above / below ``desired`` (None: it is not).
    above_since_s: float | None = None
    below_since_s: float | None = None
    # The highest ``needed`` seen while below: where a scale-down lands.
    peak_while_below: int = 0


@dataclass(frozen=True)
class Decision:
    state: ScalingState
    # A change to log (None: none).
    change: "Change | None" = None


@dataclass(frozen=True)
class Change:
    from_workers: int
    to_workers: int
    needed: int
    reason: str


def scaling_settings(record: VersionRecord) -> ScalingSettings:
    return ScalingSettings(
        min_workers=record.min_workers,
        max_workers=record.max_workers,
        target_jobs_per_worker=record.target_jobs_per_worker,
        up_after_s=record.scale_up_after_ms / 1000,
        down_after_s=record.scale_down_after_ms / 1000,
        cooldown_s=record.scale_cooldown_ms / 1000,
    )


def needed_workers(signal: Signal, settings: ScalingSettings) -> int:
    return math.ceil(signal.jobs / max(settings.target_jobs_per_worker, 1e-9))


def initial_state(settings: ScalingSettings) -> ScalingState:
    return ScalingState(desired=settings.min_workers)


def decide(settings: ScalingSettings, state: ScalingState, signal: Signal, capacity: int) -> Decision:
    """The desired count after ``signal``; ``capacity`` bounds it (workers the host can hold)."""
    low = settings.min_workers
    high = max(low, min(settings.max_workers, capacity))
    current = min(max(state.desired, low), high)
    if current != state.desired:  # the range changed (ScaleWorker): follow it at once
        return _change(state, current, signal, needed_workers(signal, settings), "range")
    if not settings.autoscaled:
        return Decision(replace(state, above_since_s=None, below_since_s=None, peak_while_below=0))
    needed = min(max(needed_workers(signal, settings), low), high)
    if current == 0 and signal.jobs > 0:
        return _change(state, 1, signal, needed, "a job waits and no worker runs")
    cooled = state.changed_at_s is None or signal.at_s - state.changed_at_s >= settings.cooldown_s
    if needed > current:
        since = state.above_since_s if state.above_since_s is not None else signal.at_s
        state = replace(state, above_since_s=since, below_since_s=None, peak_while_below=0)
        if cooled and signal.at_s - since >= settings.up_after_s:
            return _change(state, needed, signal, needed, "backlog")
        return Decision(state)
    if needed < current:
        since = state.below_since_s if state.below_since_s is not None else signal.at_s
        peak = max(state.peak_while_below, needed) if state.below_since_s is not None else needed
        state = replace(state, above_since_s=None, below_since_s=since, peak_while_below=peak)
        if cooled and signal.at_s - since >= settings.down_after_s:
            return _change(state, peak, signal, needed, "idle" if peak == low else "less load")
        return Decision(state)
    return Decision(replace(state, above_since_s=None, below_since_s=None, peak_while_below=0))


def _change(state: ScalingState, to: int, signal: Signal, needed: int, reason: str) -> Decision:
    new = ScalingState(desired=to, changed_at_s=signal.at_s)
    return Decision(new, Change(state.desired, to, needed, reason))
