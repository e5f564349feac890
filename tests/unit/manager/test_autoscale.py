"""The autoscaling policy against load series on a simulated clock: step, ramp, spike, oscillation,
steady saturation and idle, with its bounds and cooldown."""

import itertools
from collections.abc import Iterable
from dataclasses import replace

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
    assert needed_workers(Signal(0, queued=3, in_flight=2), SETTINGS) == 2, "jobs taken count as busy time"


def test_needed_workers_count_busy_time_at_the_target_utilization() -> None:
    assert needed_workers(Signal(0, queued=0, in_flight=3, busy=2.4), SETTINGS) == 3, "2.4 / 0.8 = 3"
    assert needed_workers(Signal(0, queued=0, in_flight=3, busy=2.5), SETTINGS) == 4
    assert needed_workers(Signal(0, queued=4, in_flight=1, busy=1.0), SETTINGS) == 4, "1 / 0.8 + 4 / 2"
    assert needed_workers(Signal(0, queued=0, in_flight=0, busy=0.3), SETTINGS) == 1


def test_a_stateful_versions_live_sequences_all_count_as_waiting() -> None:
    held = Signal(0, queued=1, in_flight=5, stateful=True)
    assert needed_workers(held, SETTINGS) == 3, "6 live sequences / 2"


def test_a_step_up_waits_for_a_sustained_backlog_then_jumps() -> None:
    history = run(SETTINGS, series((10, 0), (10, 7)))
    assert desired_at(history, 10) == 1
    assert desired_at(history, 11) == 1, "a backlog must last up_after_s"
    assert desired_at(history, 12) == 4, "then straight to what is needed (7 jobs / 2 = 4)"


def test_a_window_shorter_than_the_passes_needs_two_passes() -> None:
    quick = replace(SETTINGS, up_after_s=0.3)
    history = run(quick, series((3, 0), (3, 7)))
    assert (desired_at(history, 3), desired_at(history, 4)) == (1, 4)


def test_passes_far_apart_do_not_vouch_for_the_time_between() -> None:
    # A manager away for a minute: its last pass before that does not make the new need sustained.
    history = run(SETTINGS, [(0.0, 7), (60.0, 7), (61.0, 7), (62.0, 7)])
    assert [desired for _, desired in history] == [1, 1, 1, 4]


def test_a_window_may_start_at_time_zero() -> None:
    state = ScalingState(desired=3)
    for t in range(40):
        state = decide(SETTINGS, state, Signal(at_s=float(t), queued=0, in_flight=0), NO_LIMIT).state
    assert state.desired == 1


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


def test_scaling_down_lands_on_the_highest_sustained_need_of_the_window() -> None:
    # From 4 workers to a load that needs 1 worker, with a second one needed for 3 s of every 10: it
    # settles on 2, not 1 (at 1, those 3 s would scale it up again).
    settled = series((5, 8)) + [(float(t), 4 if t % 10 < 3 else 2) for t in range(5, 90)]
    history = run(SETTINGS, settled)
    assert desired_at(history, 40) == 2
    assert history[-1][1] == 2


def test_a_need_that_never_lasts_up_after_s_is_not_kept() -> None:
    # Half a worker's load with a blip needing two for one second in twenty: scaling up would never
    # follow the blips, so scaling down does not keep them either.
    blips = series((5, 8)) + [(float(t), 4 if t % 20 == 0 else 1) for t in range(5, 80)]
    history = run(SETTINGS, blips)
    assert desired_at(history, 40) == 1
    assert changes(history) == 2


def test_scaling_down_lands_on_the_windows_mean_load() -> None:
    # Needs 3 workers and 2 in turn, a pass each: never 3 for up_after_s, yet 2 would be short of
    # the load half of the time (mean 2.25 workers).
    alternating = [(float(t), 6 if t % 2 else 3) for t in range(120)]
    history = run(SETTINGS, series((5, 6)) + alternating[5:])
    assert {desired for t, desired in history if t > 3} == {3}


def test_a_steady_load_that_keeps_every_worker_busy_never_scales_down() -> None:
    # Three workers 85-95% busy, each holding its job, the queue drained to 0-2 waiting jobs: the
    # queue alone (ceil(jobs / 2) = 2) would take a worker away while all three are needed.
    settings = replace(SETTINGS, max_workers=3)
    state = ScalingState(desired=3)
    seen = set()
    for t in range(600):
        busy = 2.55 + 0.3 * ((t * 7) % 11) / 10
        signal = Signal(at_s=float(t), queued=(t * 5) % 3, in_flight=3, busy=busy)
        state = decide(settings, state, signal, NO_LIMIT).state
        seen.add(state.desired)
    assert seen == {3}


def test_workers_busy_past_the_target_get_help_then_go_when_the_load_falls() -> None:
    settings = replace(SETTINGS, max_workers=3)
    state = initial_state(settings)
    history = []
    for t in range(120):
        busy = 1.0 if t < 20 else 1.5 if t < 50 else 0.2  # one worker saturated, then two at 75%, then light
        signal = Signal(at_s=float(t), queued=0, in_flight=2, busy=busy)
        decision = decide(settings, state, signal, NO_LIMIT)
        state = decision.state
        history.append((float(t), state.desired))
        if t == 2:
            assert decision.change is not None
            assert decision.change.reason == "busy"
    assert desired_at(history, 2) == 2, "1.0 / 0.8: a second worker"
    assert desired_at(history, 49) == 2, "1.5 / 0.8 = 1.9: two are enough"
    assert desired_at(history, 80) == 1, "0.2 busy: back to one after down_after_s"


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
