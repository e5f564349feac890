import json
from pathlib import Path
from typing import Any

from bench import report
from bench.targets import evaluate


def load(
    server: str, variant: str, concurrency: int, rps: float, p50: float, rep: int = 0, **extra: Any
) -> dict[str, Any]:
    model = variant.split("_")[0]
    batching = "off" if "_b1_" in variant else variant.rsplit("_", 1)[-1]
    return {
        "kind": "load",
        "server": server,
        "section": "matrix",
        "api": "predictions",
        "client": "python",
        "model": model,
        "variant": variant,
        "batching": batching,
        "workers": 1,
        "concurrency": concurrency,
        "rep": rep,
        "throughput_rps": rps,
        "errors": {},
        "latency_ms": {"p50": p50, "p90": p50 * 1.5, "p99": p50 * 2},
        "cpu_ms_per_req": {"gateway": 0.3},
        "rss_max_mib": {"gateway": 50.0},
        "foreign_cores": 0.1,
        **extra,
    }


def records() -> list[dict[str, Any]]:
    out = [
        {
            "kind": "env",
            "phase": "start",
            "plan": "test",
            "reps": 3,
            "cpus": 2,
            "load_average": [0.5, 0.5, 0.5],
        },
        {
            "kind": "inprocess",
            "model": "mlp",
            "batch": 1,
            "inferences_per_s": 50000.0,
            "latency_ms": {"p50": 0.02},
        },
        {
            "kind": "inprocess",
            "model": "cnn",
            "batch": 8,
            "inferences_per_s": 60.0,
            "latency_ms": {"p50": 130.0},
        },
        {
            "kind": "cold_start",
            "server": "sluice",
            "to_healthy_s": 0.8,
            "to_ready_s": 1.0,
            "rss_idle_mib": {"gateway": 55.0},
        },
        {
            "kind": "cold_start",
            "server": "torchserve",
            "to_healthy_s": 2.6,
            "to_ready_s": 2.7,
            "rss_idle_mib": {"frontend": 110.0},
        },
        {
            "kind": "held_streams",
            "server": "sluice",
            "streams": 1000,
            "still_open": 1000,
            "gateway_rss_mib": 120.0,
        },
    ]
    for rep, (s_p50, t_p50) in enumerate([(1.0, 1.6), (0.9, 1.5), (1.1, 1.7)]):
        out.append(load("sluice", "mlp_b1_w1", 1, 900.0 + rep, s_p50, rep))
        out.append(load("torchserve", "mlp_b1_w1", 1, 500.0, t_p50, rep))
        out.append(load("sluice", "mlp_b8_w1_eager", 1, 880.0, 1.05, rep))
        out.append(load("sluice", "mlp_b8_w1_eager", 64, 3000.0, 20.0, rep))
        out.append(load("torchserve", "mlp_b8_w1_fill", 16, 2000.0, 8.0, rep))
        out.append(load("sluice", "cnn_b8_w1_fill", 16, 57.0, 280.0, rep))
    return out


def test_targets_are_ratios_of_the_same_run() -> None:
    outcomes = {o.target: o for o in evaluate(records())}
    latency = outcomes["mlp p50 latency at C=1 (Predictions, batching off, 1 worker)"]
    assert abs(latency.value - 1.0 / 1.6) < 1e-9
    assert latency.passed is True
    best = outcomes["best mlp throughput, python client"]
    assert abs(best.value - 1.5) < 1e-9
    assert best.passed
    cnn = outcomes["CNN throughput at saturation, 1 worker(s)"]
    assert abs(cnn.value - 0.95) < 1e-9
    assert cnn.passed
    streams = outcomes["gateway RSS holding 1,000 concurrent streams"]
    assert streams.passed is False
    assert streams.verdict == "missed by 20%"
    assert outcomes["cold start to Ping healthy, no models"].passed is True
    assert outcomes["CNN throughput at saturation, 2 worker(s)"].verdict == "not measured"


def test_report_has_tables_ratios_and_plots(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in records()) + "\n")
    path = report.write(tmp_path)
    text = path.read_text()
    assert "## Targets" in text
    row = next(line for line in text.splitlines() if line.startswith("| mlp_b1_w1 | 1 |"))
    assert row.startswith("| mlp_b1_w1 | 1 | 901 [900\N{EN DASH}902] | 1.00 [0.90\N{EN DASH}1.10] |")
    # Sluice/TorchServe throughput 901/500, p50 1.0/1.6; Sluice/in-process 901/50,000.
    times = "\N{MULTIPLICATION SIGN}"
    assert row.endswith(f"| 1.80{times} | 0.62{times} | 0.02{times} |")
    assert "missed by 20%" in text
    assert "## In-process limit" in text
    plots = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert "throughput_vs_concurrency_mlp.png" in plots
    assert "latency_percentiles_cnn.png" in plots
    assert all((tmp_path / "plots" / name).stat().st_size > 1000 for name in plots)
    assert "![throughput_vs_concurrency_mlp.png](plots/throughput_vs_concurrency_mlp.png)" in text


def test_the_eager_target_prefers_the_paired_rounds(tmp_path: Path) -> None:
    runs = records()
    outcome = {o.target: o for o in evaluate(runs)}["batching on at C=1 costs no latency (eager policy, mlp)"]
    assert abs(outcome.value - 1.05) < 1e-9  # matrix cells: 1.05 vs 1.0 ms
    for round_ in range(3):
        runs.append(load("sluice", "mlp_b1_w1", 1, 800.0, 1.2 + round_ / 10, round_, section="paired"))
        runs.append(load("sluice", "mlp_b8_w1_eager", 1, 800.0, 1.5 + round_ / 10, round_, section="paired"))
    outcome = {o.target: o for o in evaluate(runs)}["batching on at C=1 costs no latency (eager policy, mlp)"]
    assert abs(outcome.value - 1.6 / 1.3) < 1e-9
    assert outcome.verdict == "missed by 12%"
    assert outcome.measured.endswith(", 3 paired rounds")
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    text = report.write(tmp_path).read_text()
    assert "| mlp_b8_w1_eager | 3 | 1.60 [1.50\N{EN DASH}1.70] | 1.50, 1.60, 1.70 |" in text


def test_render_copes_with_an_empty_run() -> None:
    text = report.render([])
    assert "# Sluice benchmark report" in text
    assert "not measured" in text


def test_the_cnn_target_prefers_the_paired_rounds_with_the_in_process_limit(tmp_path: Path) -> None:
    runs = records()
    target = "CNN throughput at saturation, 1 worker(s)"
    assert abs({o.target: o for o in evaluate(runs)}[target].value - 0.95) < 1e-9  # matrix: 57 vs 60
    # The machine slowed down by the time the CNN cells ran: the paired windows see it on both sides.
    for round_, (served, limit) in enumerate([(40.0, 45.0), (44.0, 50.0), (35.0, 41.0)]):
        runs.append(
            load(
                "sluice",
                "cnn_b8_w1_fill",
                16,
                served,
                300.0,
                round_,
                section="paired",
                group="cnn_b8_w1_fill",
            )
        )
        # The same archive over KServe v2 raw tensors, in the same rounds (a row of its own; the
        # target reads the TorchServe gRPC cell).
        runs.append(
            load(
                "sluice", "cnn_b8_w1_fill", 16, served * 1.1, 300.0, round_,
                section="paired", group="cnn_b8_w1_fill", api="kserve",
            )
        )  # fmt: skip
        runs.append(
            {
                "kind": "inprocess",
                "model": "cnn",
                "batch": 8,
                "rep": round_,
                "section": "paired",
                "group": "cnn_b8_w1_fill",
                "inferences_per_s": limit,
                "latency_ms": {"p50": 8000 / limit},
            }
        )
    outcome = {o.target: o for o in evaluate(runs)}[target]
    assert abs(outcome.value - 40.0 / 45.0) < 1e-9
    assert outcome.verdict == "missed by 6%"
    assert outcome.measured.endswith("vs limit 45.0 inf/s = 89%, 3 paired rounds")
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    text = report.write(tmp_path).read_text()
    assert (
        "| cnn_b8_w1_fill | TorchServe gRPC | 16 | 3 | 40.0 [35.0\N{EN DASH}44.0] "
        "| 45.0 [41.0\N{EN DASH}50.0] | 89% |" in text
    )
    assert "| 89% | 89%, 88%, 85% |" in text
    assert "| cnn_b8_w1_fill | KServe v2 raw | 16 | 3 | 44.0" in text
    # The run-start limit keeps its own table row (the paired windows are not mixed into it).
    assert "| cnn | 8 | 60 | 130.000 | " in text
