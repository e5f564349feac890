"""Percentiles and repetition summaries: pure functions over plain lists (no numpy)."""

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default); ``values`` need not be sorted. NaN for an empty sequence."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary_ms(latencies_ns: Sequence[int]) -> dict[str, float]:
    """p50/p90/p99/p99.9, mean, min and max of latencies given in nanoseconds, in milliseconds."""
    if not latencies_ns:
        return {}
    ms = sorted(value / 1e6 for value in latencies_ns)
    out = {_label(q): percentile(ms, q) for q in PERCENTILES}
    out.update(mean=statistics.fmean(ms), min=ms[0], max=ms[-1])
    return out


def _label(q: float) -> str:
    return f"p{q:g}".replace(".", "_")


@dataclass(frozen=True)
class Spread:
    """Median of repetitions with their min and max."""

    median: float
    low: float
    high: float
    count: int

    def format(self, digits: int = 1) -> str:
        if self.count == 0 or math.isnan(self.median):
            return "\N{EN DASH}"
        if self.count == 1 or self.low == self.high:
            return f"{self.median:,.{digits}f}"
        return f"{self.median:,.{digits}f} [{self.low:,.{digits}f}\N{EN DASH}{self.high:,.{digits}f}]"


def spread(values: Iterable[float | None]) -> Spread:
    """Median, min and max of the finite values (NaN median when there are none)."""
    finite = [value for value in values if value is not None and math.isfinite(value)]
    if not finite:
        return Spread(math.nan, math.nan, math.nan, 0)
    return Spread(statistics.median(finite), min(finite), max(finite), len(finite))


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``; NaN when either is missing or the denominator is 0."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return math.nan
    return numerator / denominator
