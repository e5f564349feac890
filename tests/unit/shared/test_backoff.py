"""The shared retry backoff: doubling delays up to a cap, reset, and jitter within each step."""

import pytest
from sluice.lifecycle.backoff import Backoff


def delays(backoff: Backoff, count: int) -> list[float]:
    return [backoff.next_delay_s() for _ in range(count)]


def test_delays_double_up_to_the_cap() -> None:
    assert delays(Backoff(first_s=0.1, cap_s=0.5), 5) == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_defaults_and_a_first_delay_above_the_cap() -> None:
    assert delays(Backoff(), 6) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0])
    assert delays(Backoff(first_s=3.0, cap_s=1.0), 2) == [1.0, 1.0]


def test_reset_starts_again_from_the_first_delay() -> None:
    backoff = Backoff(first_s=0.5, cap_s=10.0)
    delays(backoff, 4)
    backoff.reset()
    assert delays(backoff, 2) == [0.5, 1.0]


def test_jitter_draws_from_the_upper_half_of_each_step() -> None:
    highs: list[float] = []

    def uniform(low: float, high: float) -> float:
        assert low == high / 2
        highs.append(high)
        return low

    backoff = Backoff(first_s=0.05, cap_s=0.2, jitter=True, uniform=uniform)
    assert delays(backoff, 4) == pytest.approx([0.025, 0.05, 0.1, 0.1])
    assert highs == pytest.approx([0.05, 0.1, 0.2, 0.2])


def test_jittered_delays_stay_within_their_step() -> None:
    backoff = Backoff(first_s=0.05, cap_s=2.0, jitter=True)
    steps = [min(0.05 * 2**n, 2.0) for n in range(12)]
    for step, delay in zip(steps, delays(backoff, 12), strict=True):
        assert step / 2 <= delay <= step
