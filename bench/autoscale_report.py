"""report.md and plots/autoscale.png of a ``make bench-autoscale`` run, from its results.jsonl."""

import statistics
from pathlib import Path
from typing import Any

from bench import plots
from bench.autoscale_analysis import (
    HIGH_START_S,
    RECOVERY_FACTOR,
    WINDOW_S,
    Run,
    summarize,
    table,
)
from bench.results import RESULTS_FILE, read
from bench.stats import spread

PLOT = "autoscale.png"


def _one(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next((record for record in records if record.get("kind") == kind), {})


def _load(values: Any) -> str:
    return " / ".join(f"{value:.2f}" for value in values) if values else "?"


def header(records: list[dict[str, Any]]) -> list[str]:
    settings = _one(records, "autoscale_settings")
    rates = _one(records, "autoscale_rates")
    sizes = settings.get("sizes", {})
    capacities = [r for r in records if r.get("kind") == "autoscale_capacity"]
    lines = [
        "# Autoscaling under a step load",
        "",
        f"Started {settings.get('started', '?')} on {settings.get('cpus', '?')} cores; load average "
        f"(1/5/15 min) {_load(settings.get('loadavg_start'))} at the start, "
        f"{_load(_one(records, 'autoscale_end').get('loadavg_end'))} at the end.",
        f"Model: the CNN (ResNet-18-shaped, 3x224x224), batch size {settings.get('batch_size', '?')}, "
        f"worker processes. Every call has a {settings.get('call_timeout_s', '?')} s deadline.",
    ]
    if capacities:
        found = ", ".join(
            f"{r['config']} {r['throughput_rps']:.1f} req/s "
            f"(other processes: {r.get('foreign_cores', 0):.2f} cores)"
            for r in capacities
        )
        lines.append(f"Capacity (closed loop, C={capacities[0].get('concurrency')}): {found}.")
    if rates:
        lines.append(
            f"Open-loop step load ({rates.get('source')} rates): {rates['low_rps']:.1f} req/s for "
            f"{sizes.get('low_s')} s, {rates['high_rps']:.1f} req/s for {sizes.get('high_s')} s, "
            f"{rates['low_rps']:.1f} req/s for {sizes.get('after_s')} s."
        )
    runs = [r for r in records if r.get("kind") == "autoscale_run"]
    scaled = next((r for r in runs if r.get("scaling")), None)
    if scaled:
        keys = ", ".join(f"{key} {value}" for key, value in scaled["scaling"].items())
        lines.append(
            f"autoscale: minWorkers {scaled['min_workers']}, maxWorkers {scaled['max_workers']}, {keys}, "
            "targetUtilization and targetJobsPerWorker their defaults (0.8, 2 x batchSize)."
        )
    noise = [r for r in runs if r.get("foreign_cores") is not None]
    if noise:
        found = ", ".join(f"{r['config']} {r['round'] + 1}: {r['foreign_cores']:.2f}" for r in noise)
        lines.append(
            f"Cores other processes used during each run (the machine's busy time less this bench's and its "
            f"stack's: noise): {found}."
        )
    lags = [r["client_lag_max_ms"] for r in runs if r.get("client_lag_max_ms") is not None]
    if lags:
        lines.append(f"The client sent every call at most {max(lags):.0f} ms after its scheduled time.")
    return lines


def definitions() -> list[str]:
    return [
        f"p99 per {WINDOW_S:g} s window of the calls scheduled in it, from the scheduled time to the answer "
        "or the error; p99 low: the second half of the first phase; scale decided, first added worker "
        "READY, all READY: seconds from the step up until the gauges (sampled every 0.25 s) show more "
        "desired workers, more live workers, the most live workers; p99 recovered: seconds from the step "
        f"up to the first window from which every window of the high phase has p99 ≤ {RECOVERY_FACTOR:g}x "
        "the run's p99 low; back down: seconds from the step down until the workers "
        "are back where they were; worker-s: live workers integrated over the load. Values: median "
        "[min\N{EN DASH}max] over the runs.",
    ]


def cold_table(records: list[dict[str, Any]]) -> list[str]:
    cold = [r for r in records if r.get("kind") == "autoscale_cold_start"]
    if not cold:
        return []
    keys = ", ".join(f"{key} {value}" for key, value in cold[0].get("scaling", {}).items())
    lines = [
        "## Cold start from zero",
        "",
        f"minWorkers 0, maxWorkers 1, {keys}. Each repetition waits until the version has no worker "
        "(and 3 s more), then times one call and then calls one after another.",
        "",
        "| repetition | first call (ms) | warm calls, median (ms) | cold / warm "
        "| gateway's cold-start wait (ms) |",
        "|---|---|---|---|---|",
    ]
    for record in cold:
        warm = statistics.median(record["warm_s"])
        waited = record.get("gateway_cold_wait_s")
        waited_text = "\N{EN DASH}" if waited is None else f"{waited * 1e3:.0f}"
        lines.append(
            f"| {record['repetition'] + 1} | {record['cold_s'] * 1e3:.0f} | {warm * 1e3:.0f} "
            f"| {record['cold_s'] / warm:.1f}x | {waited_text} |"
        )
    firsts = spread(r["cold_s"] * 1e3 for r in cold)
    warms = spread(statistics.median(r["warm_s"]) * 1e3 for r in cold)
    lines += [
        "",
        f"First call {firsts.format(0)} ms against {warms.format(0)} ms warm (median [min\N{EN DASH}max]).",
    ]
    return lines


def write(out: Path) -> Path:
    records = read(out / RESULTS_FILE)
    runs = [Run.of(record) for record in records if record.get("kind") == "autoscale_run"]
    configs = list(_one(records, "autoscale_settings").get("sizes", {}).get("configurations", []))
    configs += [run.config for run in runs if run.config not in configs]
    summaries = [summarize(run) for run in runs]
    lines = [*header(records), ""]
    if runs:
        lines += [
            "## Step load",
            "",
            table(summaries, configs),
            "",
            *definitions(),
            f"p99 first {HIGH_START_S:g} s of high: calls scheduled in the high phase's first seconds.",
            "",
        ]
        if plots.autoscale_timeline(runs, configs, out / "plots" / PLOT):
            lines += [f"![worker count and p99 over time](plots/{PLOT})", ""]
    lines += cold_table(records)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
