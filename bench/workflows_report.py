"""``report.md`` of a workflow benchmark run (``bench/workflows.py``), from its ``results.json``:
medians [min, max] of the rounds for each setup, paired ratios by round, the chained client's hops at
C=1 and the CPU each process spent per request."""

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.stats import spread
from bench.workflow_store import CNN, POST, PRE, WORKFLOW

Record = dict[str, Any]
NODES = (PRE, CNN, POST)
# CPU columns: (heading, roles). A worker role is ``worker:<model>``; a workflow's are ``<wf>__<node>``.
SERVER_ROLES = {"gateway", "frontend"}
DASH = "\N{EN DASH}"
TIMES = "\N{MULTIPLICATION SIGN}"


def _rows(records: list[Record], setup: str, concurrency: int | None = None) -> list[Record]:
    return [
        r for r in records if r["setup"] == setup and (concurrency is None or r["concurrency"] == concurrency)
    ]


def _p(record: Record, key: str) -> float:
    value = record.get("latency_ms", {}).get(key)
    return float(value) if value is not None else math.nan


def best_by_round(records: list[Record], setup: str) -> dict[int, Record]:
    """Round -> the window of the setup with the highest throughput in that round."""
    best: dict[int, Record] = {}
    for record in _rows(records, setup):
        held = best.get(record["round"])
        if held is None or record["throughput_rps"] > held["throughput_rps"]:
            best[record["round"]] = record
    return best


def _c1_by_round(records: list[Record], setup: str) -> dict[int, Record]:
    return {r["round"]: r for r in _rows(records, setup, 1)}


def _failed(records: Iterable[Record]) -> str:
    errors: Counter[str] = Counter()
    for record in records:
        errors.update(record.get("errors", {}))
    return ", ".join(f"{count} {label}" for label, count in sorted(errors.items())) or "0"


def _stalls(records: Iterable[Record]) -> str:
    stalls = [value for record in records for value in record.get("stalls_s", [])]
    return f"{len(stalls)} (longest {max(stalls):.1f} s)" if stalls else "0"


def _ratio_by_round(
    numerator: dict[int, Record], denominator: dict[int, Record], value: Any
) -> tuple[float, list[float]]:
    """Median of the paired per-round ratios, and the ratios by round."""
    ratios = []
    for round_index in sorted(numerator):
        if round_index in denominator:
            top, bottom = value(numerator[round_index]), value(denominator[round_index])
            if bottom and math.isfinite(top) and math.isfinite(bottom):
                ratios.append(top / bottom)
    return (statistics.median(ratios) if ratios else math.nan), ratios


def _times(value: float) -> str:
    return DASH if math.isnan(value) else f"{value:.2f}{TIMES}"


def main_table(results: Record) -> list[str]:
    records = results["records"]
    reference = "sluice_workflow"
    lines = [
        "| setup | C=1 p50 ms | C=1 p99 ms | best throughput, rps | at C | p50 / rps vs Sluice `/wfpredict` "
        "| calls ≥ 1 s | failed calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ref_c1, ref_best = _c1_by_round(records, reference), best_by_round(records, reference)
    for setup in results["setups"]:
        key = setup["key"]
        c1, best = _c1_by_round(records, key), best_by_round(records, key)
        at = Counter(record["concurrency"] for record in best.values()).most_common(1)
        versus = DASH
        if key != reference:
            p50_ratio, _ = _ratio_by_round(c1, ref_c1, lambda r: _p(r, "p50"))
            rps_ratio, _ = _ratio_by_round(best, ref_best, lambda r: r["throughput_rps"])
            versus = f"{_times(p50_ratio)} / {_times(rps_ratio)}"
        lines.append(
            f"| {setup['label']} | {_latency_cell(c1, 'p50')} | {_latency_cell(c1, 'p99')} "
            f"| {spread(r['throughput_rps'] for r in best.values()).format(0)} "
            f"| {at[0][0] if at else DASH} | {versus} | {_stalls(_rows(records, key))} "
            f"| {_failed(_rows(records, key))} |"
        )
    return lines


def _latency_cell(by_round: dict[int, Record], key: str) -> str:
    """Median [min, max] of the rounds, saying so when some round answered no call in its window."""
    measured = spread(_p(r, key) for r in by_round.values())
    text = measured.format(2)
    if 0 < measured.count < len(by_round):
        text += f" (calls answered in {measured.count} of {len(by_round)} windows)"
    return text


def concurrency_table(results: Record) -> list[str]:
    records = results["records"]
    levels = sorted({record["concurrency"] for record in records})
    lines = [
        "| setup | "
        + " | ".join(f"C={c} rps" for c in levels)
        + " | "
        + " | ".join(f"C={c} p50 ms" for c in levels)
        + " |",
        "|---|" + "---|" * (2 * len(levels)),
    ]
    for setup in results["setups"]:
        rps = [spread(r["throughput_rps"] for r in _rows(records, setup["key"], c)).format(0) for c in levels]
        p50 = [spread(_p(r, "p50") for r in _rows(records, setup["key"], c)).format(1) for c in levels]
        lines.append(f"| {setup['label']} | " + " | ".join(rps + p50) + " |")
    return lines


def paired_lines(results: Record) -> list[str]:
    """Ratios of pairs of setups measured in the same rounds, by round."""
    records = results["records"]
    keys = {setup["key"] for setup in results["setups"]}
    pairs = [
        ("sluice_workflow", "torchserve_workflow", "Sluice `/wfpredict` against TorchServe's"),
        ("sluice_chain", "sluice_workflow", "Sluice: the client's chain against the workflow"),
        ("torchserve_chain", "torchserve_workflow", "TorchServe: the client's chain against the workflow"),
        ("sluice_kserve", "sluice_workflow", "Sluice: KServe v2 against `/wfpredict`"),
        ("sluice_chain", "torchserve_chain", "client's chain, Sluice against TorchServe"),
    ]
    lines = []
    for top, bottom, label in pairs:
        if top not in keys or bottom not in keys:
            continue
        parts = []
        for name, pick, value in (
            ("C=1 p50", _c1_by_round, lambda r: _p(r, "p50")),
            ("C=1 p99", _c1_by_round, lambda r: _p(r, "p99")),
            ("best rps", best_by_round, lambda r: r["throughput_rps"]),
        ):
            median, by_round = _ratio_by_round(pick(records, top), pick(records, bottom), value)
            rounds = ", ".join(f"{ratio:.2f}" for ratio in by_round)
            parts.append(f"{name} {_times(median)}" + (f" ({rounds})" if len(by_round) > 1 else ""))
        lines.append(f"- {label}: " + "; ".join(parts))
    return lines


def hops_table(results: Record) -> list[str]:
    records = results["records"]
    lines = [
        "| setup | pre p50 ms | cnn p50 ms | post p50 ms | sum of the hops | whole call p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    found = False
    for setup in results["setups"]:
        c1 = [r for r in _rows(records, setup["key"], 1) if r.get("hops_ms")]
        if not c1:
            continue
        found = True
        hops = [spread(r["hops_ms"][node].get("p50") for r in c1) for node in NODES]
        total = sum(hop.median for hop in hops)
        lines.append(
            f"| {setup['label']} | "
            + " | ".join(hop.format(2) for hop in hops)
            + f" | {total:.2f} | {spread(_p(r, 'p50') for r in c1).format(2)} |"
        )
    return lines if found else []


def _cpu_columns(cpu: dict[str, float], setup: Record) -> list[float]:
    """client, server front (gateway or frontend), redis, the setup's pre / cnn / post workers,
    everything else (manager, standby, the other setup's idle workers)."""
    wanted = {
        node: f"worker:{WORKFLOW}__{node}" if setup["form"] != "chain" else f"worker:{node}" for node in NODES
    }
    used = {"client", "redis", *SERVER_ROLES, *wanted.values()}
    return [
        cpu.get("client", 0.0),
        sum(cpu.get(role, 0.0) for role in SERVER_ROLES),
        cpu.get("redis", 0.0),
        *(cpu.get(wanted[node], 0.0) for node in NODES),
        sum(value for role, value in cpu.items() if role not in used),
    ]


def cpu_table(results: Record) -> list[str]:
    records = results["records"]
    heads = ["client", "gateway / frontend", "redis", "pre worker", "cnn worker", "post worker", "other"]
    lines = [
        "| setup | C | " + " | ".join(heads) + " | total |",
        "|---|---|" + "---|" * (len(heads) + 1),
    ]
    for setup in results["setups"]:
        for label, picked in (
            ("1", list(_c1_by_round(records, setup["key"]).values())),
            ("best", list(best_by_round(records, setup["key"]).values())),
        ):
            columns = [_cpu_columns(r.get("cpu_ms_per_req", {}), setup) for r in picked]
            if not columns:
                continue
            medians = [statistics.median(column[i] for column in columns) for i in range(len(heads))]
            at = (
                label
                if label == "1"
                else "/".join(str(c) for c in sorted({r["concurrency"] for r in picked}))
            )
            lines.append(
                f"| {setup['label']} | {at} | "
                + " | ".join(f"{value:.2f}" for value in medians)
                + f" | {sum(medians):.2f} |"
            )
    return lines


def summary(results: Record) -> list[str]:
    sizes = results["sizes"]
    records = results["records"]
    foreign = spread(r.get("foreign_cores") for r in records)
    load = results["load_average"]
    servers = results.get("servers", {})
    rounds = len({r["round"] for r in records})
    cut = " (cut short by its deadline)" if results.get("cut_by_deadline") else ""
    lines = [
        f"# Workflows: `pre → cnn → post` ({results['started']})",
        "",
        f"`python -m bench.workflows{' --quick' if results['quick'] else ''}`: "
        f"{rounds} round(s), {sizes['warmup_s']:g} s warm-up + {sizes['window_s']:g} s window per cell, "
        f"C=1 then C={', '.join(str(c) for c in sizes['concurrency'])} (the best is the throughput); each "
        f"setup first warmed {sizes['server_warmup_s']:g} s at C=16. Run took "
        f"{results['duration_s'] / 60:.1f} min{cut}.",
        "",
        f"{results['cores']} cores, shared by the load generator (this process, aiohttp), the servers and "
        f"their workers: nothing is pinned. `uptime` load {load['start'][0]:.2f} at the start, "
        f"{load['end'][0]:.2f} at the end; other processes used {foreign.format(2)} cores in the median "
        f"[min{DASH}max] window.",
        "",
        f"Request: one 3{TIMES}32{TIMES}32 image as JSON ({results['request']['bytes']:,} bytes); every "
        "answer checked against the pipeline run in-process "
        f"(class {results['request']['expected_class']}). CNN: "
        "ResNet-18-shaped TorchScript, batch 8, `maxBatchDelay` 5 ms, one worker, one torch thread "
        f"(Sluice: {_cnn_threads(servers)}; TorchServe workers: OMP_NUM_THREADS "
        f"{', '.join(servers.get('torchserve', {}).get('worker_omp_num_threads', [])) or DASH}); "
        "`pre`/`post` batch 1, one worker each.",
    ]
    stalls = servers.get("torchserve", {}).get("stalls")
    if stalls is not None:
        timeouts = stalls["node_timeouts_in_kept_log"]
        listed = ", ".join(f"{node} {count}" for node, count in sorted(timeouts.items())) or "none"
        longest = (
            f", {min(stalls['stalled_ms']):,}{DASH}{max(stalls['stalled_ms']):,} ms each"
            if stalls["stalled_ms"]
            else ""
        )
        lines += [
            "",
            f"TorchServe's `/wfpredict` over the whole run (its access log, warm-ups included): "
            f"{stalls['wfpredict_stalled']} of {stalls['wfpredict_calls']:,} calls took ≥ 1 s{longest}. "
            f"Nodes its DagExecutor timed out waiting for, in the part of its log still on disk: {listed}.",
        ]
    lines.append("")
    for name in ("sluice", "torchserve"):
        if name in servers:
            lines.append(
                f"{'Sluice' if name == 'sluice' else 'TorchServe'} started in "
                f"{servers[name]['start_s']:.1f} s, "
                f"with the workflow registered in {servers[name]['with_workflow_s']:.1f} s."
            )
    return lines


def _cnn_threads(servers: Record) -> str:
    threads = servers.get("sluice", {}).get("torch_threads", {})
    return ", ".join(f"{model} {count}" for model, count in sorted(threads.items()) if CNN in model) or DASH


def report(results: Record) -> str:
    rounds = len({r["round"] for r in results["records"]})
    parts = [
        *summary(results),
        "",
        f"## Latency and throughput (median [min{DASH}max] of {rounds} round(s))",
        "",
        "Latency: every call that started in the window, however long after it ended. Calls ≥ 1 s: "
        f"in the cells' loads, each with its {results['sizes']['warmup_s']:g} s warm-up and its tail "
        "(not the setups' first warm-up).",
        "",
        *main_table(results),
        "",
        "Paired by round (ratios of the same round's windows; by round in brackets):",
        "",
        *paired_lines(results),
        "",
        "## By concurrency (median of the rounds)",
        "",
        *concurrency_table(results),
    ]
    hops = hops_table(results)
    if hops:
        parts += ["", "## The client's chain at C=1: each call (median of the rounds' p50s)", "", *hops]
    parts += [
        "",
        "## CPU per request, ms (median of the rounds; warm-up answers included)",
        "",
        *cpu_table(results),
        "",
    ]
    return "\n".join(parts)


def write_report(folder: Path) -> str:
    results = json.loads((folder / "results.json").read_text())
    text = report(results)
    (folder / "report.md").write_text(text)
    return text
