"""`make bench-autoscale`'s logic on a short step load, against a real `sluice start` on free ports, so
that the benchmark cannot silently rot: the CNN archives, the open-loop load, the gauge sampler, the
cold start from zero, the report and the plot. Timings are the benchmark's business, not asserted."""

from pathlib import Path

import pytest

from bench import autoscale, autoscale_report
from bench.autoscale_analysis import Run
from bench.openloop import schedule


@pytest.mark.timeout(240)
def test_bench_autoscale_smoke_runs_a_step_load_and_a_cold_start(tmp_path: Path) -> None:
    out = tmp_path / "results"
    records = autoscale.measure(autoscale.SMOKE, out, work=tmp_path / "work", rates=(2.0, 20.0))

    runs = [Run.of(record) for record in records if record["kind"] == "autoscale_run"]
    assert [run.config for run in runs] == ["autoscale"]
    run = runs[0]
    assert len(run.calls) == len(schedule(run.phases))
    assert [call.error for call in run.calls if call.error] == []
    assert run.samples, "the gauges were sampled"
    assert min(sample.workers for sample in run.samples) >= 1
    cold = [record for record in records if record["kind"] == "autoscale_cold_start"]
    assert len(cold) == 1
    assert cold[0]["cold_s"] > 0
    assert cold[0]["warm_s"]
    assert cold[0]["gateway_cold_requests"] == 1

    text = autoscale_report.write(out).read_text()
    assert "| autoscale | 1 |" in text
    assert "## Cold start from zero" in text
    assert (out / "plots" / "autoscale.png").stat().st_size > 1000
