import math

import pytest

from bench.stats import latency_summary_ms, percentile, ratio, spread


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)


def test_percentile_needs_no_sorted_input_and_handles_one_value() -> None:
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_latency_summary_converts_ns_to_ms() -> None:
    summary = latency_summary_ms([1_000_000, 2_000_000, 3_000_000])
    assert summary["p50"] == pytest.approx(2.0)
    assert summary["min"] == pytest.approx(1.0)
    assert summary["max"] == pytest.approx(3.0)
    assert summary["mean"] == pytest.approx(2.0)
    assert set(summary) == {"p50", "p90", "p99", "p99_9", "mean", "min", "max"}
    assert latency_summary_ms([]) == {}


def test_spread_ignores_missing_values_and_formats() -> None:
    result = spread([3.0, None, 1.0, float("nan"), 2.0])
    assert (result.median, result.low, result.high, result.count) == (2.0, 1.0, 3.0, 3)
    assert result.format(1) == "2.0 [1.0\N{EN DASH}3.0]"
    assert spread([4.0]).format(0) == "4"
    assert spread([]).format() == "\N{EN DASH}"


def test_ratio_is_nan_when_undefined() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(float("nan"), 1.0))
