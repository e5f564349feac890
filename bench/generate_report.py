"""report.md and summary.json of a ``make bench-generate`` run, from its results.jsonl.

Every figure is the median of the rounds with their [min-max]; a ratio is of two medians. The goals
(as data in :data:`GOALS`' text) are judged on the continuous-batching Sluice systems, gRPC and REST
separately.
"""

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.results import RESULTS_FILE, read
from bench.stats import Spread, ratio, spread

DASH = "\N{EN DASH}"
TIMES = "\N{MULTIPLICATION SIGN}"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.md"
SYSTEMS = ("sluice_grpc", "sluice_rest", "torchserve_rest", "sluice_plain", "inprocess")
SLUICE_CB = ("sluice_grpc", "sluice_rest")
LABELS = {
    "sluice_grpc": "Sluice CB, gRPC",
    "sluice_rest": "Sluice CB, REST",
    "torchserve_rest": "TorchServe CB, REST",
    "sluice_plain": "Sluice no CB, gRPC",
    "inprocess": "in-process limit",
}
TOKENS_VS_TORCHSERVE = 1.5
SHARE_OF_LIMIT = 0.8
ITL_TAIL = 3.0
# Server roles, in the cost table's order; the client and idle processes are shown apart.
SERVER_ROLES = ("gateway", "frontend", "worker", "redis", "manager")


@dataclass(frozen=True)
class Cell:
    """One (system, concurrency) over its rounds."""

    system: str
    concurrency: int
    records: tuple[dict[str, Any], ...]

    def values(self, path: str) -> list[float | None]:
        return [_get(record, path) for record in self.records]

    def spread(self, path: str) -> Spread:
        return spread(self.values(path))

    def median(self, path: str) -> float:
        return self.spread(path).median

    def errors(self) -> int:
        return sum(int(record.get("errors_total") or 0) for record in self.records)

    def cpu_us(self, role: str) -> Spread:
        return spread((record.get("cpu_us_per_token") or {}).get(role) for record in self.records)

    def server_cpu_us(self) -> Spread:
        return spread(
            sum(v for role, v in (record.get("cpu_us_per_token") or {}).items() if role in SERVER_ROLES)
            for record in self.records
        )

    def redis_commands(self) -> Spread:
        return spread(
            sum(commands.values()) if (commands := record.get("redis_commands_per_token")) else None
            for record in self.records
        )

    def top_commands(self, count: int = 4) -> str:
        totals: dict[str, list[float]] = {}
        for record in self.records:
            for name, value in (record.get("redis_commands_per_token") or {}).items():
                totals.setdefault(name, []).append(float(value))
        ranked = sorted(totals.items(), key=lambda item: -statistics.median(item[1]))[:count]
        return ", ".join(f"{name} {statistics.median(values):.2f}" for name, values in ranked)


def _get(record: dict[str, Any], path: str) -> float | None:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, int | float) else None


def cells(records: Iterable[dict[str, Any]]) -> dict[tuple[str, int], Cell]:
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in records:
        if record.get("kind") == "generate_cell":
            grouped.setdefault((record["system"], int(record["concurrency"])), []).append(record)
    return {key: Cell(key[0], key[1], tuple(rows)) for key, rows in grouped.items()}


def _one(records: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next((record for record in records if record.get("kind") == kind), {})


def _fmt(value: float, digits: int = 2) -> str:
    return DASH if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _ratio(value: float) -> str:
    return DASH if math.isnan(value) else f"{value:.2f}{TIMES}"


# Sections -----------------------------------------------------------------------------------------
def header(records: list[dict[str, Any]], found: dict[tuple[str, int], Cell]) -> list[str]:
    settings = _one(records, "generate_settings")
    servers = _one(records, "generate_servers")
    end = _one(records, "generate_end")
    sizes = settings.get("sizes", {})
    foreign = [float(r.get("foreign_cores") or 0.0) for r in records if r.get("kind") == "generate_cell"]
    loads = " / ".join(f"{v:.2f}" for v in settings.get("loadavg_start") or [])
    loads_end = " / ".join(f"{v:.2f}" for v in end.get("loadavg_end") or [])
    sluice_threads = (servers.get("sluice") or {}).get("torch_threads")
    ts_threads = (servers.get("torchserve") or {}).get("worker_omp_num_threads")
    finished = end.get("finished", f"{DASH} (the run did not finish)")
    lines = [
        "# Generative serving (tiny_gpt)",
        "",
        f"Started {settings.get('started', '?')}, finished {finished}, on {settings.get('cpus', '?')} "
        f"cores; load average (1/5/15 min) {loads} at the start, {loads_end or DASH} at the end.",
        f"Other processes (the machine's busy time less every measured and idle server process and the "
        f"client) used {_fmt(statistics.median(foreign) if foreign else math.nan)} cores in the median "
        f"cell, {_fmt(max(foreign) if foreign else math.nan)} at most.",
        "",
        f"- Model: examples/tiny_gpt (2 layers, d_model 64, float64, greedy), {sizes.get('max_new_tokens')} "
        f"new tokens per request, {len(settings.get('prompts', []))} prompts taken in turn: "
        + ", ".join(f"`{p}`" for p in settings.get("prompts", []))
        + ".",
        f"- Continuous batching: `batchSize` {sizes.get('batch_size')}, `maxBatchDelay` "
        f"{sizes.get('max_batch_delay_ms')} ms (one tiny_gpt.mar for Sluice and TorchServe); no CB: "
        "tiny_gpt_plain.mar, `batchSize` 1. One worker per model.",
        f"- Torch threads: {sizes.get('torch_threads')} everywhere (Sluice's launch records: "
        f"{sluice_threads}; TorchServe's workers' OMP_NUM_THREADS: {ts_threads}; the limit: "
        "`torch.set_num_threads`).",
        f"- Load: closed loop, {sizes.get('rounds')} rounds alternating the systems' order, each cell "
        f"{sizes.get('warmup_s')} s warm-up + {sizes.get('window_s')} s window; concurrency "
        f"{', '.join(str(c) for c in sizes.get('concurrency', []))}.",
        "- TTFT: from a request's send to its first token (every request sent in the window; those in "
        "flight at its end are read to their end); ITL: the gaps between a request's consecutive "
        "tokens (both inside the window); tokens/s: tokens that arrived in the window. Every streamed "
        "text is checked against the model run in-process (a wrong or missing token is an error).",
        "- The in-process limit: `reference.drive` in a process of its own with min(C, batch size) "
        "slots and the request count Sluice CB gRPC completed at that C; its TTFT counts from when a "
        "closed-loop client would have sent the request.",
        "",
    ]
    return lines


def main_table(found: dict[tuple[str, int], Cell]) -> list[str]:
    lines = [
        "## Tokens/s and latency",
        "",
        "| system | C | tokens/s | vs TorchServe | vs limit | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
        "| ITL p99 ms | requests | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in SYSTEMS:
        for (name, concurrency), cell in sorted(found.items()):
            if name != system:
                continue
            ts = found.get(("torchserve_rest", concurrency))
            limit = found.get(("inprocess", concurrency))
            tokens = cell.median("tokens_per_s")
            vs_ts = vs_limit = math.nan
            if ts and system != "torchserve_rest":
                vs_ts = ratio(tokens, ts.median("tokens_per_s"))
            if limit and system != "inprocess":
                vs_limit = ratio(tokens, limit.median("tokens_per_s"))
            requests = cell.spread("requests_completed_in_window").format(0)
            if system == "inprocess":
                requests = DASH
            lines.append(
                f"| {LABELS[system]} | {concurrency} | {cell.spread('tokens_per_s').format(0)} "
                f"| {_ratio(vs_ts)} | {_ratio(vs_limit)} "
                f"| {cell.spread('ttft_ms.p50').format(1)} | {cell.spread('ttft_ms.p99').format(1)} "
                f"| {cell.spread('itl_ms.p50').format(2)} | {cell.spread('itl_ms.p99').format(2)} "
                f"| {requests} | {cell.errors()} |"
            )
    return [*lines, ""]


def cost_table(found: dict[tuple[str, int], Cell]) -> list[str]:
    lines = [
        "## What each token costs",
        "",
        "CPU µs per streamed token by process (the whole cell: warm-up, window and the tail, over every "
        "token it streamed); Redis commands per token (`INFO commandstats` around the cell: what Redis "
        "executed, scripts' commands included). TorchServe's frontend is its JVM.",
        "",
        "| system | C | gateway / frontend | worker | Redis | manager | server total | client "
        "| Redis cmds/token | top commands per token |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in SYSTEMS:
        for (name, concurrency), cell in sorted(found.items()):
            if name != system:
                continue
            front = cell.cpu_us("frontend") if system == "torchserve_rest" else cell.cpu_us("gateway")
            sluice = system.startswith("sluice")
            lines.append(
                f"| {LABELS[system]} | {concurrency} | {front.format(1)} | {cell.cpu_us('worker').format(1)} "
                f"| {cell.cpu_us('redis').format(1) if sluice else DASH} "
                f"| {cell.cpu_us('manager').format(1) if sluice else DASH} "
                f"| {cell.server_cpu_us().format(1)} | {cell.cpu_us('client').format(1)} "
                f"| {cell.redis_commands().format(2) if sluice else DASH} "
                f"| {cell.top_commands() if sluice else ''} |"
            )
    return [*lines, ""]


def sweep_table(records: list[dict[str, Any]]) -> list[str]:
    sweep = [r for r in records if r.get("kind") == "generate_sweep"]
    if not sweep:
        return []
    lines = [
        "## The limit's batch size",
        "",
        "`reference.drive` alone at the highest concurrency, one run per batch size (before the rounds):",
        "",
        "| batch size | C | tokens/s | ITL p50 ms | ITL p99 ms | TTFT p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in sweep:
        lines.append(
            f"| {r['configured_batch_size']} | {r['concurrency']} | {r['tokens_per_s']:,.0f} "
            f"| {_fmt(r['itl_ms'].get('p50'))} | {_fmt(r['itl_ms'].get('p99'))} "
            f"| {_fmt(r['ttft_ms'].get('p99'), 1)} |"
        )
    return [*lines, ""]


@dataclass(frozen=True)
class Verdict:
    goal: str
    system: str
    met: bool | None
    detail: str


def goals(found: dict[tuple[str, int], Cell]) -> list[Verdict]:
    verdicts: list[Verdict] = []
    levels = sorted({c for (_, c) in found})
    top = max(levels) if levels else 0
    for system in SLUICE_CB:
        if not any(name == system for name, _ in found):
            continue
        # 1. tokens/s >= 1.5x TorchServe's at 8 streams and above.
        parts, oks = [], []
        for c in [c for c in levels if c >= 8]:
            mine, ts = found.get((system, c)), found.get(("torchserve_rest", c))
            if mine and ts:
                r = ratio(mine.median("tokens_per_s"), ts.median("tokens_per_s"))
                parts.append(f"C={c} {_ratio(r)}")
                oks.append(r >= TOKENS_VS_TORCHSERVE)
        verdicts.append(
            Verdict(
                f"tokens/s ≥ {TOKENS_VS_TORCHSERVE}{TIMES} TorchServe's at C ≥ 8",
                system,
                all(oks) if oks else None,
                ", ".join(parts) or "no TorchServe cells",
            )
        )
        # 2. TTFT p99 <= TorchServe's.
        parts, oks = [], []
        for c in levels:
            mine, ts = found.get((system, c)), found.get(("torchserve_rest", c))
            if mine and ts:
                a, b = mine.median("ttft_ms.p99"), ts.median("ttft_ms.p99")
                parts.append(f"C={c} {_fmt(a, 1)} vs {_fmt(b, 1)} ms")
                oks.append(a <= b)
        verdicts.append(
            Verdict("TTFT p99 ≤ TorchServe's", system, all(oks) if oks else None, "; ".join(parts) or DASH)
        )
        # 3. >= 80% of the in-process limit at saturation.
        mine, limit = found.get((system, top)), found.get(("inprocess", top))
        if mine and limit:
            r = ratio(mine.median("tokens_per_s"), limit.median("tokens_per_s"))
            by_round = _paired(mine, limit, "tokens_per_s")
            verdicts.append(
                Verdict(
                    f"≥ {SHARE_OF_LIMIT:.0%} of the in-process limit at saturation (C={top})",
                    system,
                    r >= SHARE_OF_LIMIT,
                    f"{r:.0%} ({mine.median('tokens_per_s'):,.0f} vs {limit.median('tokens_per_s'):,.0f} "
                    f"tokens/s; by round {by_round})",
                )
            )
        # 4. ITL p99 <= 3x its p50.
        parts, oks = [], []
        for c in levels:
            mine, limit = found.get((system, c)), found.get(("inprocess", c))
            if mine:
                p50, p99 = mine.median("itl_ms.p50"), mine.median("itl_ms.p99")
                part = f"C={c} {_fmt(p99)} / {_fmt(p50)} = {_ratio(ratio(p99, p50))}"
                if limit:
                    own = ratio(limit.median("itl_ms.p99"), limit.median("itl_ms.p50"))
                    part += f" (the limit's {_ratio(own)})"
                parts.append(part)
                oks.append(p99 <= ITL_TAIL * p50)
        verdicts.append(
            Verdict(
                f"ITL p99 ≤ {ITL_TAIL:g}{TIMES} its p50", system, all(oks) if oks else None, "; ".join(parts)
            )
        )
    return verdicts


def _paired(a: Cell, b: Cell, path: str) -> str:
    """Ratios of ``a`` to ``b`` round by round."""
    by_round_b = {int(r["round"]): _get(r, path) for r in b.records}
    out = []
    for record in sorted(a.records, key=lambda r: int(r["round"])):
        other = by_round_b.get(int(record["round"]))
        value = _get(record, path)
        if other and value is not None:
            out.append(f"{value / other:.0%}")
    return ", ".join(out) or DASH


def goals_section(verdicts: list[Verdict]) -> list[str]:
    lines = ["## Goals", "", "| goal | system | met | measured |", "|---|---|---|---|"]
    for verdict in verdicts:
        met = DASH if verdict.met is None else ("yes" if verdict.met else "**no**")
        lines.append(f"| {verdict.goal} | {LABELS[verdict.system]} | {met} | {verdict.detail} |")
    return [*lines, ""]


def notes(records: list[dict[str, Any]], found: dict[tuple[str, int], Cell]) -> list[str]:
    lines = ["## Notes", ""]
    merged = []
    for system in SYSTEMS:
        rows = [r for r in records if r.get("kind") == "generate_cell" and r.get("system") == system]
        tokens = sum(int(r.get("tokens_total") or 0) for r in rows)
        extra = sum(int(r.get("merged_tokens") or 0) for r in rows)
        if tokens and system != "inprocess":
            merged.append(f"{LABELS[system]} {extra / tokens:.1%}")
    if merged:
        lines.append(
            "- Tokens that arrived in one chunk with others (a server that sends one chunk per token "
            "has none): " + ", ".join(merged) + "."
        )
    kinds: dict[str, int] = {}
    for r in records:
        if r.get("kind") == "generate_cell":
            for name, count in (r.get("error_kinds_total") or r.get("errors") or {}).items():
                kinds[f"{r['system']}: {name}"] = kinds.get(f"{r['system']}: {name}", 0) + int(count)
    failed = [r for r in records if r.get("kind") == "generate_error"]
    lines.append(
        "- Errors over whole cells (warm-up and tail too): "
        + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none")
        + "."
    )
    for r in failed:
        where = f"{r['system']} C={r['concurrency']} round {r['round'] + 1}"
        lines.append(f"- Cell failed: {where}: {r['error']}")
    return [*lines, ""]


def summary(records: list[dict[str, Any]], found: dict[tuple[str, int], Cell]) -> dict[str, Any]:
    out: dict[str, Any] = {"cells": {}, "goals": []}
    for (system, concurrency), cell in sorted(found.items()):
        entry: dict[str, Any] = {
            path: cell.median(path)
            for path in ("tokens_per_s", "ttft_ms.p50", "ttft_ms.p99", "itl_ms.p50", "itl_ms.p99")
        }
        entry["errors"] = cell.errors()
        entry["cpu_us_per_token"] = {
            role: cell.cpu_us(role).median
            for role in ("client", *SERVER_ROLES)
            if not math.isnan(cell.cpu_us(role).median)
        }
        entry["redis_commands_per_token"] = cell.redis_commands().median
        out["cells"].setdefault(system, {})[str(concurrency)] = entry
    out["goals"] = [asdict(verdict) for verdict in goals(found)]
    out["settings"] = _one(records, "generate_settings")
    out["servers"] = _one(records, "generate_servers")
    cleaned: dict[str, Any] = _finite(out)
    return cleaned


def _finite(value: Any) -> Any:
    """JSON has no NaN: None instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def render(records: list[dict[str, Any]]) -> str:
    found = cells(records)
    lines = [
        *header(records, found),
        *main_table(found),
        *goals_section(goals(found)),
        *cost_table(found),
        *sweep_table(records),
        *notes(records, found),
    ]
    return "\n".join(lines)


def write(out: Path) -> Path:
    records = read(out / RESULTS_FILE)
    path = out / REPORT_FILE
    path.write_text(render(records))
    (out / SUMMARY_FILE).write_text(json.dumps(summary(records, cells(records)), indent=2))
    return path
