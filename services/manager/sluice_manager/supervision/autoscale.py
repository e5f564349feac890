"""How many workers a version should run, between its ``minWorkers`` and ``maxWorkers``, from its
load: a pure function of the version's settings, its scaling state so far and the latest signal
(unit-tested with tables and simulated clocks, as Ray Serve tests its policy).

The signal is what Redis holds for the version (sluice_manager.supervision.worker_state): jobs
queued and in flight, the age of the oldest, and how busy its workers were over their last
heartbeat (for a generative model, continuous batching or async handlers: the share of its slots a
worker holds running, when that is higher, so a worker full of slow generations counts as busy).
The load, in workers, is the workers' busy time at ``target_utilization`` plus one worker per
``target_jobs_per_worker`` jobs waiting; ``needed`` is the load rounded up. Counting waiting jobs
alone is not enough: once a backlog has drained, each of N busy workers holds about one job, so
the queue alone says half of them are idle while all of them are needed.

- A count is *sustained* when every pass of the last ``up_after_s`` needed at least that many.
- Up: a sustained need above the current count (a backlog or busy workers, not a blip) moves to
  ``needed`` at once. From zero workers, any job moves to one at once: a request is waiting.
- Down: once the sustained need has stayed below the current count for ``down_after_s``, the count
  moves down to what that window's load needs: its mean load rounded up, and at least the highest
  need sustained within it (a count the same load would not scale up from again). A load that
  oscillates around a threshold keeps its mean above it, or its peaks reset the window: no thrash.
- Between two changes at least ``cooldown_s`` pass (except from zero). Never below ``min_workers``,
  never above ``max_workers`` nor what the host can hold. A stopped worker drains first (the
  reconciler stops the idle ones, gracefully).
"""

import math
from dataclasses import dataclass, replace

from sluice.registry.records import VersionRecord

# Loads within this of a whole number of workers round down (0.8 x 3.75 is not quite 3 in floats).
ROUNDING = 1e-6
# Passes come every reconcile interval (a second by default); one further back than the window by
# more than this does not vouch for the load in between.
GAP_S = 5.0


@dataclass(frozen=True)
class ScalingSettings:
    min_workers: int
    max_workers: int
    # Jobs waiting for a worker that call for one more worker.
    target_jobs_per_worker: float = 2.0
    # The share of its time a worker is meant to spend running its handler.
    target_utilization: float = 0.8
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
    # The workers' busy shares over their last heartbeat, summed: 2.5 is two and a half workers' worth.
    busy: float = 0.0
    # A stateful version's jobs are live sequences: each keeps a slot on its worker until it ends,
    # so all of them count as waiting, held or not.
    stateful: bool = False

    @property
    def jobs(self) -> int:
        return self.queued + self.in_flight

    @property
    def waiting(self) -> int:
        return self.jobs if self.stateful else self.queued


@dataclass(frozen=True)
class ScalingState:
    """What the policy remembers between passes (kept in Redis, so a restarted manager resumes)."""

    desired: int
    # When ``desired`` last changed (None: never, so no cooldown holds the first change back).
    changed_at_s: float | None = None
    # The passes of the last ``up_after_s`` as (at_s, needed), oldest first, from the last pass at or
    # before its start: the sustained need is the least of them.
    recent: tuple[tuple[float, int], ...] = ()
    # Since when the sustained need has stayed below ``desired`` (None: it is not); in that window,
    # the highest need sustained and the load of each pass, summed: where a scale-down lands.
    below_since_s: float | None = None
    peak_while_below: int = 0
    load_sum_while_below: float = 0.0
    passes_while_below: int = 0


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
        target_utilization=record.target_utilization,
        up_after_s=record.scale_up_after_ms / 1000,
        down_after_s=record.scale_down_after_ms / 1000,
        cooldown_s=record.scale_cooldown_ms / 1000,
    )


def load(signal: Signal, settings: ScalingSettings) -> float:
    """The version's load in workers: busy time at the target utilization plus waiting jobs."""
    return signal.busy / max(settings.target_utilization, 1e-9) + signal.waiting / max(
        settings.target_jobs_per_worker, 1e-9
    )


def needed_workers(signal: Signal, settings: ScalingSettings) -> int:
    return max(0, math.ceil(load(signal, settings) - ROUNDING))


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
        return Decision(_no_window(replace(state, recent=())))
    needed = min(max(needed_workers(signal, settings), low), high)
    if current == 0 and signal.jobs > 0:
        return _change(state, 1, signal, needed, "a job waits and no worker runs")
    recent = _recent(state.recent, signal.at_s, needed, settings.up_after_s)
    sustained = _sustained(recent, signal.at_s, settings.up_after_s)
    state = replace(state, recent=recent)
    cooled = state.changed_at_s is None or signal.at_s - state.changed_at_s >= settings.cooldown_s
    if sustained is not None and sustained > current:
        if cooled:
            return _change(state, needed, signal, needed, "backlog" if signal.waiting else "busy")
        return Decision(_no_window(state))
    floor = needed if sustained is None else sustained
    if floor >= current:
        return Decision(_no_window(state))
    since = signal.at_s if state.below_since_s is None else state.below_since_s
    state = _below(state, since, signal.at_s, floor, load(signal, settings), settings.up_after_s)
    if not cooled or signal.at_s - since < settings.down_after_s:
        return Decision(state)
    mean = math.ceil(state.load_sum_while_below / state.passes_while_below - ROUNDING)
    to = max(mean, state.peak_while_below, low)
    if to >= current:  # the window's load as a whole still needs every worker: watch a new one
        return Decision(_no_window(state))
    return _change(state, to, signal, needed, "idle" if to == low else "less load")


def _below(
    state: ScalingState, since: float, at_s: float, floor: int, pass_load: float, up_after_s: float
) -> ScalingState:
    """``state`` with this pass added to the window (from ``since``) in which the need stays below
    ``desired``."""
    fresh = state.below_since_s is None
    peak = 0 if fresh else state.peak_while_below
    if at_s - up_after_s >= since:  # a need sustained inside the window, not in its run-up
        peak = max(peak, floor)
    return replace(
        state,
        below_since_s=since,
        peak_while_below=peak,
        load_sum_while_below=(0.0 if fresh else state.load_sum_while_below) + pass_load,
        passes_while_below=(0 if fresh else state.passes_while_below) + 1,
    )


def _no_window(state: ScalingState) -> ScalingState:
    return replace(
        state, below_since_s=None, peak_while_below=0, load_sum_while_below=0.0, passes_while_below=0
    )


def _recent(
    passes: tuple[tuple[float, int], ...], at_s: float, needed: int, window_s: float
) -> tuple[tuple[float, int], ...]:
    """``passes`` with this one added, keeping those inside ``window_s`` and the last one before it
    (unless that one is more than ``GAP_S`` older still: a manager that was away starts afresh)."""
    start = at_s - window_s
    kept = (*((t, n) for t, n in passes if start - GAP_S <= t < at_s), (at_s, needed))
    first = max((i for i, (t, _) in enumerate(kept) if t <= start), default=0)
    return tuple(kept[first:])


def _sustained(recent: tuple[tuple[float, int], ...], at_s: float, window_s: float) -> int | None:
    """The least need over the last ``window_s`` (None until the passes cover it)."""
    if not recent or recent[0][0] > at_s - window_s:
        return None
    return min(n for _, n in recent)


def _change(state: ScalingState, to: int, signal: Signal, needed: int, reason: str) -> Decision:
    new = ScalingState(desired=to, changed_at_s=signal.at_s, recent=state.recent)
    return Decision(new, Change(state.desired, to, needed, reason))
