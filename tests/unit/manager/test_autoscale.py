"""The autoscaling policy against load series on a simulated clock: step, ramp, spike, oscillation
and idle, with its bounds and cooldown."""

import itertools
from collections.abc import Iterable

import pytest
from sluice_manager.supervision.autoscale import (
    ScalingSettings,
    ScalingState,
    Signal,
    decide,
    initial_state,
    needed_workers,
)

SETTINGS = ScalingSettings(
    min_workers=1, max_workers=4, target_jobs_per_worker=2, up_after_s=2, down_after_s=30, cooldown_s=5
)
NO_LIMIT = 1000


def run(
    settings: ScalingSettings, loads: Iterable[tuple[float, int]], *, capacity: int = NO_LIMIT
) -> list[tuple[float, int]]:
    """(time, jobs) samples once a second -> (time, desired) after each pass."""
    state = initial_state(settings)
    seen = []
    for at_s, jobs in loads:
        decision = decide(settings, state, Signal(at_s=at_s, queued=jobs, in_flight=0), capacity)
        state = decision.state
        seen.append((at_s, state.desired))
    return seen


def series(*segments: tuple[int, int]) -> list[tuple[float, int]]:
    """Segments of (seconds, jobs), sampled every second from t = 0."""
    samples: list[tuple[float, int]] = []
    for seconds, jobs in segments:
        start = len(samples)
        samples += [(float(start + i), jobs) for i in range(seconds)]
    return samples


def desired_at(history: list[tuple[float, int]], at_s: float) -> int:
    return next(desired for t, desired in history if t == at_s)


def changes(history: list[tuple[float, int]]) -> int:
    return sum(1 for (_, a), (_, b) in itertools.pairwise(history) if a != b)


def test_needed_workers_rounds_up() -> None:
    assert needed_workers(Signal(0, queued=0, in_flight=0), SETTINGS) == 0
    assert needed_workers(Signal(0, queued=1, in_flight=0), SETTINGS) == 1
    assert needed_workers(Signal(0, queued=3, in_flight=2), SETTINGS) == 3


def test_a_step_up_waits_for_a_sustained_backlog_then_jumps() -> None:
    history = run(SETTINGS, series((10, 0), (10, 7)))
    assert desired_at(history, 10) == 1
    assert desired_at(history, 11) == 1, "a backlog must last up_after_s"
    assert desired_at(history, 12) == 4, "then straight to what is needed (7 jobs / 2 = 4)"


def test_a_short_spike_scales_nothing() -> None:
    history = run(SETTINGS, series((10, 0), (1, 50), (20, 0)))
    assert {desired for _, desired in history} == {1}


def test_a_ramp_follows_within_bounds_and_cooldown() -> None:
    ramp = [(float(t), t) for t in range(40)]  # one more job every second
    history = run(SETTINGS, ramp)
    assert max(d for _, d in history) == 4, "never above max_workers"
    change_times = [later for (_, a), (later, b) in itertools.pairwise(history) if a != b]
    assert all(later - earlier >= 5 for earlier, later in itertools.pairwise(change_times))


def test_idle_comes_down_slowly_to_the_minimum() -> None:
    history = run(SETTINGS, series((5, 8), (60, 0)))
    assert desired_at(history, 2) == 4
    assert desired_at(history, 30) == 4, "down_after_s (30 s) of idle first"
    assert desired_at(history, 35) == 1
    assert desired_at(history, 64) == 1


def test_scaling_down_lands_on_the_peak_of_the_window() -> None:
    # From 4 workers to a load that needs 1 worker, with a second one needed every fifth second: it
    # settles on 2, not 1.
    settled = series((5, 8)) + [(float(t), 4 if t % 5 == 0 else 2) for t in range(5, 60)]
    history = run(SETTINGS, settled)
    assert desired_at(history, 40) == 2
    assert history[-1][1] == 2


def test_an_oscillating_load_scales_a_bounded_number_of_times() -> None:
    # Needs 2 and 3 workers in turn every 3 seconds for ten minutes.
    wave = [(float(t), 5 if (t // 3) % 2 else 3) for t in range(600)]
    history = run(SETTINGS, wave)
    assert changes(history) <= 2


@pytest.mark.parametrize(("capacity", "expected"), [(2, 2), (3, 3), (NO_LIMIT, 4)])
def test_never_past_the_hosts_capacity(capacity: int, expected: int) -> None:
    history = run(SETTINGS, series((10, 40)), capacity=capacity)
    assert history[-1][1] == expected


def test_from_zero_the_first_job_starts_a_worker_at_once_and_idle_returns_to_zero() -> None:
    settings = ScalingSettings(min_workers=0, max_workers=2, down_after_s=10, cooldown_s=5)
    history = run(settings, series((5, 0), (1, 1), (4, 1), (30, 0)))
    assert desired_at(history, 4) == 0
    assert desired_at(history, 5) == 1, "no waiting: a request is there"
    assert desired_at(history, 19) == 1
    assert history[-1][1] == 0


def test_a_new_range_is_followed_at_once() -> None:
    state = ScalingState(desired=4, changed_at_s=100)
    narrowed = ScalingSettings(min_workers=1, max_workers=2)
    decision = decide(narrowed, state, Signal(at_s=101, queued=40, in_flight=0), NO_LIMIT)
    assert decision.state.desired == 2
    assert decision.change is not None
    assert (decision.change.from_workers, decision.change.to_workers, decision.change.reason) == (
        4,
        2,
        "range",
    )


def test_a_fixed_range_never_autoscales() -> None:
    fixed = ScalingSettings(min_workers=2, max_workers=2)
    history = run(fixed, series((5, 0), (30, 100), (30, 0)))
    assert {desired for _, desired in history} == {2}


def test_each_change_says_why() -> None:
    state = initial_state(SETTINGS)
    decision = decide(SETTINGS, state, Signal(at_s=0, queued=9, in_flight=0), NO_LIMIT)
    decision = decide(SETTINGS, decision.state, Signal(at_s=2, queued=9, in_flight=0), NO_LIMIT)
    assert decision.change is not None
    change = decision.change
    assert (change.from_workers, change.to_workers, change.needed, change.reason) == (1, 4, 4, "backlog")
