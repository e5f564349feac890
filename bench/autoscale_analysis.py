"""What ``make bench-autoscale`` reports, computed from its raw records (pure functions).

A run record holds its phases (low, high, low), every call (scheduled, sent and ended seconds from
the load's start, error label or None) and the worker samples (seconds, live workers, desired
workers, queue depth). From them:

- p99 per window: the calls *scheduled* in each ``WINDOW_S`` window, latency from the scheduled
  time until the answer or the error (a timed-out call counts with the time it took to fail);
- the reaction to the step up: the first sample after it with more desired workers than before it
  (the decision), with more live workers (the first added worker READY), and with all of them;
- p99 recovered: the start of the first window after the step up from which every window of the
  high phase has p99 at or below ``RECOVERY_FACTOR`` times the run's own low-load p99 (the second
  half of the first phase): a run whose latency degrades late, or relapses (a worker removed under
  load), recovers only after its last bad window;
- worker-seconds: live workers integrated over the load (what the configuration costs).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.openloop import Call, Phase, phase_bounds
from bench.stats import percentile, spread

WINDOW_S = 2.0
RECOVERY_FACTOR = 4.0
# The high phase's first seconds, where the backlog of the step builds and drains.
HIGH_START_S = 10.0


@dataclass(frozen=True)
class Sample:
    at_s: float
    workers: int
    desired: int | None
    queue_depth: int


@dataclass(frozen=True)
class Window:
    start_s: float
    calls: int
    errors: int
    p50_s: float
    p99_s: float


@dataclass(frozen=True)
class Run:
    config: str
    round: int
    phases: list[Phase]
    calls: list[Call]
    samples: list[Sample]

    @classmethod
    def of(cls, record: dict[str, Any]) -> "Run":
        return cls(
            config=record["config"],
            round=record["round"],
            phases=[Phase(**phase) for phase in record["phases"]],
            calls=[Call(*call) for call in record["calls"]],
            samples=[Sample(*sample) for sample in record["samples"]],
        )

    @property
    def step_up_s(self) -> float:
        return phase_bounds(self.phases)[1][1]

    @property
    def step_down_s(self) -> float:
        return phase_bounds(self.phases)[1][2]

    @property
    def end_s(self) -> float:
        return phase_bounds(self.phases)[-1][2]


def latency_p(calls: Sequence[Call], q: float = 99.0) -> float:
    """The ``q``-th percentile latency of ``calls`` in seconds (NaN when there are none)."""
    return percentile([call.latency_s for call in calls], q)


def scheduled_in(calls: Sequence[Call], start_s: float, end_s: float) -> list[Call]:
    return [call for call in calls if start_s <= call.scheduled_s < end_s]


def windows(calls: Sequence[Call], end_s: float, width_s: float = WINDOW_S) -> list[Window]:
    out = []
    count = math.ceil(end_s / width_s)
    for index in range(count):
        start = index * width_s
        inside = scheduled_in(calls, start, start + width_s)
        out.append(
            Window(
                start_s=start,
                calls=len(inside),
                errors=sum(call.error is not None for call in inside),
                p50_s=latency_p(inside, 50.0),
                p99_s=latency_p(inside),
            )
        )
    return out


def first_sample(samples: Sequence[Sample], after_s: float, holds: Callable[[Sample], bool]) -> float | None:
    """Seconds after ``after_s`` of the first sample at or after it for which ``holds(sample)``."""
    for sample in samples:
        if sample.at_s >= after_s and holds(sample):
            return sample.at_s - after_s
    return None


def workers_before(samples: Sequence[Sample], at_s: float) -> int:
    """Live workers in the last sample before ``at_s`` (0 when none was taken)."""
    earlier = [sample.workers for sample in samples if sample.at_s < at_s]
    return earlier[-1] if earlier else 0


def recovered_after(run: Run, threshold_s: float, width_s: float = WINDOW_S) -> float | None:
    """Seconds from the step up to the first window from which every window of the high phase has
    p99 at or below ``threshold_s``; None when the last one is above it."""
    high = [
        window
        for window in windows(run.calls, run.end_s, width_s)
        if run.step_up_s <= window.start_s and window.start_s + width_s <= run.step_down_s
    ]
    recovered: float | None = None
    for window in high:
        if window.calls and window.p99_s > threshold_s:
            recovered = None
        elif recovered is None:
            recovered = window.start_s - run.step_up_s
    return recovered


def worker_seconds(samples: Sequence[Sample], end_s: float) -> float:
    """Live workers integrated over [0, ``end_s``], each sample holding until the next."""
    total = 0.0
    for sample, following in zip(samples, [*samples[1:], None], strict=True):
        begin = max(sample.at_s, 0.0)
        until = min(following.at_s if following else end_s, end_s)
        if until > begin:
            total += sample.workers * (until - begin)
    return total


@dataclass(frozen=True)
class Summary:
    config: str
    round: int
    sent: int
    errors: dict[str, int]
    low_p99_ms: float
    high_start_p99_ms: float
    high_end_p99_ms: float
    after_p99_ms: float
    workers_low: int
    workers_high: int
    workers_at_step_down: int
    worker_seconds: float
    decided_s: float | None
    first_ready_s: float | None
    all_ready_s: float | None
    recovered_s: float | None
    back_down_s: float | None


def summarize(run: Run) -> Summary:
    (_, low_start, low_end), (_, high_start, high_end), (_, _, after_end) = phase_bounds(run.phases)
    low_settled = scheduled_in(run.calls, (low_start + low_end) / 2, low_end)
    low_p99 = latency_p(low_settled)
    errors: dict[str, int] = {}
    for call in run.calls:
        if call.error is not None:
            errors[call.error] = errors.get(call.error, 0) + 1
    before = workers_before(run.samples, high_start)
    desired_before = max(
        (s.desired for s in run.samples if s.at_s < high_start and s.desired is not None), default=before
    )
    high_samples = [s.workers for s in run.samples if high_start <= s.at_s < high_end]
    peak = max(high_samples, default=before)
    return Summary(
        config=run.config,
        round=run.round,
        sent=len(run.calls),
        errors=errors,
        low_p99_ms=low_p99 * 1e3,
        high_start_p99_ms=latency_p(scheduled_in(run.calls, high_start, high_start + HIGH_START_S)) * 1e3,
        high_end_p99_ms=latency_p(scheduled_in(run.calls, (high_start + high_end) / 2, high_end)) * 1e3,
        after_p99_ms=latency_p(scheduled_in(run.calls, high_end, after_end)) * 1e3,
        workers_low=before,
        workers_high=peak,
        workers_at_step_down=workers_before(run.samples, high_end),
        worker_seconds=worker_seconds(run.samples, run.end_s),
        decided_s=first_sample(
            run.samples, high_start, lambda s: s.desired is not None and s.desired > desired_before
        ),
        first_ready_s=first_sample(run.samples, high_start, lambda s: s.workers > before),
        all_ready_s=(
            first_sample(run.samples, high_start, lambda s: s.workers >= peak) if peak > before else None
        ),
        recovered_s=recovered_after(run, RECOVERY_FACTOR * low_p99),
        back_down_s=(
            first_sample(run.samples, high_end, lambda s: s.workers <= before) if peak > before else None
        ),
    )


def _seconds(values: Sequence[float | None], digits: int = 1) -> str:
    """Median [min-max] of the runs' values; "never" for a run without one."""
    found = [value for value in values if value is not None]
    missing = len(values) - len(found)
    if not found:
        return "\N{EN DASH}" if not values else "never"
    text = spread(found).format(digits) + " s"
    return text + (f" ({missing} never)" if missing else "")


def _ms(values: Sequence[float]) -> str:
    return spread(values).format(0)


def table(summaries: Sequence[Summary], configs: Sequence[str]) -> str:
    """One row per configuration, the median [min-max] over its runs."""
    lines = [
        "| configuration | runs | workers: low → peak → at step down | worker-s | p99 low (ms) | p99 first "
        f"{HIGH_START_S:g} s of high (ms) | p99 high, 2nd half (ms) | p99 after step down (ms) "
        "| scale decided | first added worker READY | all READY | p99 recovered | back down "
        "| errors / sent |",
        "|" + "---|" * 14,
    ]
    for config in configs:
        rows = [s for s in summaries if s.config == config]
        if not rows:
            continue
        errors: dict[str, int] = {}
        for row in rows:
            for label, count in row.errors.items():
                errors[label] = errors.get(label, 0) + count
        low = "/".join(str(value) for value in sorted({row.workers_low for row in rows}))
        high = "/".join(str(value) for value in sorted({row.workers_high for row in rows}))
        down = "/".join(str(value) for value in sorted({row.workers_at_step_down for row in rows}))
        autoscaled = any(row.workers_high > row.workers_low for row in rows)

        def react(values: Sequence[float | None], autoscaled: bool = autoscaled) -> str:
            return _seconds(values) if autoscaled else "\N{EN DASH}"

        error_text = ", ".join(f"{label} {count}" for label, count in sorted(errors.items())) or "0"
        lines.append(
            f"| {config} | {len(rows)} | {low} → {high} → {down} "
            f"| {spread(row.worker_seconds for row in rows).format(0)} "
            f"| {_ms([row.low_p99_ms for row in rows])} | {_ms([row.high_start_p99_ms for row in rows])} "
            f"| {_ms([row.high_end_p99_ms for row in rows])} | {_ms([row.after_p99_ms for row in rows])} "
            f"| {react([row.decided_s for row in rows])} | {react([row.first_ready_s for row in rows])} "
            f"| {react([row.all_ready_s for row in rows])} | {_seconds([row.recovered_s for row in rows])} "
            f"| {react([row.back_down_s for row in rows])} "
            f"| {error_text} / {sum(row.sent for row in rows)} |"
        )
    return "\n".join(lines)
