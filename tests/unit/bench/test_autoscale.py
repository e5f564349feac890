"""`make bench-autoscale`'s pieces that need no server: the open-loop schedule and generator (with a
call that only sleeps), the analysis of a synthetic run, the report's table, metrics parsing and the
archives' model-config.yaml."""

import asyncio

import pytest
import yaml

from bench import autoscale
from bench.autoscale_analysis import (
    Run,
    Sample,
    recovered_after,
    summarize,
    table,
    windows,
    worker_seconds,
)
from bench.openloop import Call, Phase, open_loop, phase_bounds, schedule

STEP = [Phase("low", 2.0, 4.0), Phase("high", 10.0, 4.0), Phase("low", 2.0, 4.0)]
# A longer high phase for the analysis: 4 s low, 12 s high, 4 s low.
LONG = [Phase("low", 10.0, 4.0), Phase("high", 10.0, 12.0), Phase("low", 10.0, 4.0)]


def test_the_schedule_spaces_each_phase_evenly_at_its_rate() -> None:
    times = schedule(STEP)
    assert len(times) == 8 + 40 + 8
    assert times[:3] == [0.0, 0.5, 1.0]
    assert times[8:10] == [4.0, 4.1]
    assert times[-1] == pytest.approx(11.5)
    assert phase_bounds(STEP) == [("low", 0.0, 4.0), ("high", 4.0, 8.0), ("low", 8.0, 12.0)]


async def test_calls_go_out_on_schedule_whatever_the_answers() -> None:
    in_flight = 0
    most = 0

    async def slow() -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0.3)
        finally:
            in_flight -= 1

    _start, calls = await open_loop(slow, [index * 0.02 for index in range(10)], call_timeout_s=5.0)
    assert len(calls) == 10
    assert most >= 5, "later calls were sent before the earlier ones were answered"
    assert all(call.error is None for call in calls)
    assert all(call.latency_s >= 0.3 for call in calls)
    # A late send counts in the latency: it runs from the scheduled time.
    assert all(call.latency_s >= call.ended_s - call.sent_s for call in calls)


async def test_errors_and_calls_past_the_timeout_are_counted_with_labels() -> None:
    count = 0

    async def flaky() -> None:
        nonlocal count
        count += 1
        if count == 1:
            raise TimeoutError
        if count == 2:
            await asyncio.sleep(60)

    _start, calls = await open_loop(flaky, [0.0, 0.01, 0.02], call_timeout_s=0.2)
    assert [call.error for call in calls] == ["TIMEOUT", "TIMEOUT", None]
    assert calls[1].latency_s < 30


def _run(config: str, workers: list[tuple[float, int, int]], slow: tuple[float, float]) -> Run:
    """20 s at 10 calls/s; calls take 0.05 s, but 2 s when scheduled within ``slow``; the last fails."""
    calls = []
    for index in range(200):
        at = index / 10
        latency = 2.0 if slow[0] <= at < slow[1] else 0.05
        calls.append(Call(at, at, at + latency, "UNAVAILABLE" if index == 199 else None))
    samples = [Sample(at, live, desired, 0) for at, live, desired in workers]
    return Run(config, 0, LONG, calls, samples)


def test_the_step_up_reaction_recovery_and_cost_of_a_run() -> None:
    scaled = [(-0.5, 1, 1), (0.0, 1, 1), (5.0, 1, 3), (6.0, 2, 3), (7.0, 3, 3), (18.0, 1, 1)]
    run = _run("autoscale", scaled, (4.0, 6.0))
    assert [w.calls for w in windows(run.calls, run.end_s)] == [20] * 10
    assert windows(run.calls, run.end_s)[2].p99_s == pytest.approx(2.0)
    assert windows(run.calls, run.end_s)[9].errors == 1
    assert worker_seconds(run.samples, 20.0) == pytest.approx(1 * 6.0 + 2 * 1.0 + 3 * 11.0 + 1 * 2.0)
    summary = summarize(run)
    assert (summary.workers_low, summary.workers_high, summary.workers_at_step_down) == (1, 3, 3)
    assert (summary.decided_s, summary.first_ready_s, summary.all_ready_s) == (1.0, 2.0, 3.0)
    assert summary.back_down_s == 2.0
    assert summary.recovered_s == 2.0
    assert summary.low_p99_ms == pytest.approx(50.0)
    assert summary.errors == {"UNAVAILABLE": 1}
    assert summary.sent == 200


def test_recovery_counts_from_after_the_last_bad_window_of_the_high_phase() -> None:
    # Slow at the step [4, 6) and again in [8, 10) (a relapse): recovered from 10 s on.
    spiky = _run("x", [(0.0, 1, 1)], (4.0, 6.0))
    spiky.calls[80:100] = [
        Call(c.scheduled_s, c.sent_s, c.scheduled_s + 2.0, None) for c in spiky.calls[80:100]
    ]
    assert recovered_after(spiky, 0.1) == 6.0
    assert recovered_after(spiky, 3.0) == 0.0
    # Slow only late in the high phase: fine at first, but not recovered.
    late = _run("x", [(0.0, 1, 1)], (14.0, 16.0))
    assert recovered_after(late, 0.1) is None


def test_a_run_that_never_recovers_and_never_scales() -> None:
    summary = summarize(_run("fixed_1", [(0.0, 1, 1), (19.0, 1, 1)], (4.0, 16.0)))
    assert summary.recovered_s is None
    assert summary.first_ready_s is None
    assert summary.back_down_s is None
    text = table([summary, summarize(_run("fixed_1", [(0.0, 1, 1)], (4.0, 6.0)))], ["autoscale", "fixed_1"])
    row = next(line for line in text.splitlines() if line.startswith("| fixed_1"))
    assert "| 2 | 1 → 1 → 1 |" in row
    assert "(1 never)" in row
    assert "UNAVAILABLE 2 / 400" in row
    assert "| autoscale" not in text


def test_gauges_are_read_for_one_model_from_the_metrics_page() -> None:
    page = "\n".join(
        [
            "# TYPE sluice_workers gauge",
            'sluice_workers{model_name="cnn_autoscale",model_version="1.0"} 2',
            'sluice_workers{model_name="other",model_version="1.0"} 5',
            'sluice_desired_workers{model_name="cnn_autoscale",model_version="1.0"} 3',
            'sluice_queue_depth{model_name="cnn_autoscale",model_version="1.0"} 17',
        ]
    )
    values = autoscale.metric_values(page, "cnn_autoscale", autoscale.GAUGES)
    assert values == {"sluice_workers": 2, "sluice_desired_workers": 3, "sluice_queue_depth": 17}


def test_rates_put_one_worker_over_its_capacity_and_three_under_theirs() -> None:
    low, high = autoscale.pick_rates(40.0, 60.0)
    assert low == pytest.approx(12.0)
    assert high == pytest.approx(48.0)
    # Three workers holding little more than one: still above one worker's capacity.
    assert autoscale.pick_rates(40.0, 41.0)[1] == pytest.approx(44.0)
    # Three holding far more: at most 1.5 times one worker's.
    assert autoscale.pick_rates(40.0, 120.0)[1] == pytest.approx(60.0)


def test_each_configuration_archive_carries_its_range_and_scaling_keys() -> None:
    sizes = autoscale.Sizes()
    auto = yaml.safe_load(
        autoscale.archive_variant(autoscale.configuration("autoscale", sizes)).model_config_yaml()
    )
    assert (auto["minWorkers"], auto["maxWorkers"]) == (1, 3)
    assert auto["scaleUpAfterMSec"] == sizes.scaling.up_after_ms
    assert "targetJobsPerWorker" not in auto
    fixed = autoscale.archive_variant(autoscale.configuration("fixed_3", sizes))
    assert fixed.name == "cnn_fixed_3"
    assert (fixed.model_config()["minWorkers"], fixed.model_config()["maxWorkers"]) == (3, 3)
    assert "scaleUpAfterMSec" not in fixed.model_config()
    zero = autoscale.archive_variant(autoscale.configuration("from_zero", sizes)).model_config()
    assert (zero["minWorkers"], zero["maxWorkers"], zero["scaleDownAfterMSec"]) == (0, 1, 5000)
    assert len(autoscale.Sizes().phases(1.0, 2.0)) == 3
