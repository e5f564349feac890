"""``report.md`` from a run's ``results.jsonl``: tables with medians and min-max of the repetitions,
the ratios Sluice/TorchServe and Sluice/in-process for each cell, the targets, the profiles, and the
plots (``plots/*.png``). ``render`` is pure; ``write`` does the file I/O."""

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.cells import Cell, Cells, Record, inprocess_limit, of_kind
from bench.results import RESULTS_FILE, read
from bench.stats import Spread, ratio, spread
from bench.targets import evaluate

REPORT_FILE = "report.md"


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _num(value: float, digits: int = 2, unit: str = "") -> str:
    return (
        "\N{EN DASH}"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:,.{digits}f}{unit}"
    )


def _ratio(numerator: Spread | None, denominator: Spread | None) -> str:
    if numerator is None or denominator is None:
        return "\N{EN DASH}"
    return _num(ratio(numerator.median, denominator.median), 2, "\N{MULTIPLICATION SIGN}")


def _thr(cell: Cell | None) -> Spread | None:
    return cell.throughput() if cell else None


def _fmt(value: Spread | None, digits: int = 1) -> str:
    return value.format(digits) if value is not None else "\N{EN DASH}"


def _errors(cell: Cell | None) -> str:
    if cell is None:
        return ""
    count = cell.errors()
    return f" ⚠{count} err" if count else ""


def environment(records: list[Record]) -> list[str]:
    start = next(iter(of_kind(records, "env", phase="start")), {})
    end = next(iter(of_kind(records, "env", phase="end")), {})
    loads = [r for r in records if r.get("kind") == "load"]
    foreign = spread(r.get("foreign_cores") for r in loads)
    lines = ["## Machine and noise", ""]
    lines += table(
        ["", "value"],
        [
            ["preset / repetitions", f"{start.get('plan', '?')} / {start.get('reps', '?')}"],
            ["CPUs (affinity)", f"{start.get('cpus')} ({start.get('affinity')})"],
            ["load average (1/5/15 min) at start / end", f"{_loads(start)} / {_loads(end)}"],
            [
                "CPU used by other processes during the cells (cores, median [min\N{EN DASH}max])",
                foreign.format(2),
            ],
            ["Python / Java", f"{start.get('python')} / {start.get('java') or 'no TorchServe run'}"],
            ["h2load", "yes" if start.get("h2load") else "no"],
        ],
    )
    lines += [
        "Client and servers share the machine's cores: the load generator runs in the benchmark process "
        "(unpinned, except the `pinning` cells, where it runs under `taskset` on the last CPU). The "
        'CPU-ms per request of every process are in the CPU table below; "other processes" is the '
        "machine's busy time minus ours (other engineers' tests), i.e. the noise.",
        "",
    ]
    return lines


def _loads(env: Record) -> str:
    return " ".join(f"{value:.2f}" for value in env.get("load_average") or []) or "\N{EN DASH}"


def inprocess(records: list[Record]) -> list[str]:
    rows = []
    for model in ("mlp", "cnn"):
        for batch in (1, 8):
            limit = inprocess_limit(records, model, batch)
            if limit.count == 0:
                continue
            p50 = spread(
                (r.get("latency_ms") or {}).get("p50")
                for r in of_kind(records, "inprocess", model=model, batch=batch)
            )
            threads = {r.get("threads") for r in of_kind(records, "inprocess", model=model, batch=batch)}
            rows.append(
                [model, str(batch), limit.format(0), p50.format(3), ",".join(str(t) for t in sorted(threads))]
            )
    if not rows:
        return []
    return [
        "## In-process limit (handler called in a loop)",
        "",
        *table(["model", "batch", "inferences/s", "ms per call (p50)", "torch threads"], rows),
    ]


def matrix(records: list[Record], cells: Cells, model: str) -> list[str]:
    variants = sorted(
        {
            c.key.variant
            for c in cells.select(section="matrix", api="predictions")
            if c.first.get("model") == model
        },
        key=_variant_order,
    )
    if not variants:
        return []
    limits = {1: inprocess_limit(records, model, 1), 8: inprocess_limit(records, model, 8)}
    rows = []
    for variant in variants:
        concurrencies = sorted(
            {c.key.concurrency for c in cells.select(section="matrix", api="predictions", variant=variant)}
        )
        for concurrency in concurrencies:
            s = cells.get(server="sluice", api="predictions", variant=variant, concurrency=concurrency)
            t = cells.get(
                server="torchserve",
                api="predictions",
                variant=variant.replace("_eager", "_fill"),
                concurrency=concurrency,
            )
            first = (s or t).first if (s or t) else {}
            limit = limits[8 if first.get("batching", "off") != "off" else 1]
            rows.append(
                [
                    variant,
                    str(concurrency),
                    _fmt(_thr(s), 0) + _errors(s),
                    _fmt(s.latency() if s else None, 2),
                    _fmt(s.latency("p99") if s else None, 2),
                    _fmt(_thr(t), 0) + _errors(t),
                    _fmt(t.latency() if t else None, 2),
                    _fmt(t.latency("p99") if t else None, 2),
                    _ratio(_thr(s), _thr(t)),
                    _ratio(s.latency() if s else None, t.latency() if t else None),
                    _ratio(_thr(s), limit),
                ]
            )
    title = {
        "mlp": "mlp 64→256→256→10",
        "cnn": "ResNet-18-shaped CNN 3\N{MULTIPLICATION SIGN}224\N{MULTIPLICATION SIGN}224",
    }[model]
    lines = [f"## {title}: TorchServe gRPC `Predictions`, Python client", ""]
    lines += [
        "req/s and latency: median of the repetitions [min\N{EN DASH}max]. Eager archives are Sluice's; "
        "TorchServe "
        "has no batch policy, so their TorchServe column is its `fill` archive. S/in-proc compares with "
        "the in-process limit at the same batch size.",
        "",
    ]
    return lines + table(
        [
            "archive",
            "C",
            "Sluice req/s",
            "p50 ms",
            "p99 ms",
            "TorchServe req/s",
            "p50 ms",
            "p99 ms",
            "S/TS req/s",
            "S/TS p50",
            "S/in-proc",
        ],
        rows,
    )


def _variant_order(name: str) -> tuple[int, int, str]:
    parts = name.split("_")
    batch = int(parts[1][1:]) if len(parts) > 1 and parts[1].startswith("b") else 0
    workers = int(parts[2][1:]) if len(parts) > 2 and parts[2].startswith("w") else 0
    return workers, batch, name


def protocols(cells: Cells) -> list[str]:
    rows = []
    for cell in cells.select(section="protocols"):
        key = cell.key
        base = cells.get(
            server=key.server, api="predictions", variant=key.variant, concurrency=key.concurrency
        )
        other = (
            cells.get(
                section="protocols",
                server="torchserve",
                api=key.api,
                variant=key.variant.replace("_eager", "_fill"),
                concurrency=key.concurrency,
            )
            if key.server == "sluice"
            else None
        )
        rows.append(
            [
                key.server,
                key.api,
                key.variant,
                str(key.concurrency),
                _fmt(_thr(cell), 0) + _errors(cell),
                _fmt(cell.latency(), 2),
                _ratio(_thr(cell), _thr(base)),
                _ratio(_thr(cell), _thr(other)),
            ]
        )
    if not rows:
        return []
    return [
        "## Other APIs: KServe v2 `ModelInfer` (raw tensors), REST `/predictions`",
        "",
        *table(["server", "api", "archive", "C", "req/s", "p50 ms", "vs Predictions", "S/TS"], rows),
    ]


def native(cells: Cells) -> list[str]:
    rows = []
    for cell in cells.select(section="h2load", server="sluice") + cells.select(
        section="h2load", server="torchserve"
    ):
        key = cell.key
        python = cells.get(
            server=key.server, api="predictions", variant=key.variant, concurrency=key.concurrency
        )
        other = cells.get(
            section="h2load",
            client="h2load",
            server="torchserve",
            api="predictions",
            variant=key.variant.replace("_eager", "_fill"),
            concurrency=key.concurrency,
        )
        mean = spread((r.get("latency_ms") or {}).get("mean") for r in cell.records)
        rows.append(
            [
                key.server,
                key.variant,
                str(key.concurrency),
                _fmt(_thr(cell), 0) + _errors(cell),
                mean.format(2),
                _ratio(_thr(cell), _thr(python)),
                _ratio(_thr(cell), _thr(other)) if key.server == "sluice" else "",
            ]
        )
    if not rows:
        return []
    return [
        "## Native load generator (h2load, pre-framed gRPC `Predictions`, one connection)",
        "",
        "h2load reports mean latency, not percentiles; it cannot see gRPC status trailers, so each "
        "payload was first checked with the Python client in the same run.",
        "",
        *table(["server", "archive", "C", "req/s", "mean ms", "vs Python client", "S/TS"], rows),
    ]


def streaming(records: list[Record], cells: Cells) -> list[str]:
    rows = []
    for cell in cells.select(api="stream"):
        messages = sum(r.get("messages", 0) for r in cell.records)
        rows.append(
            [
                cell.key.server,
                str(cell.key.concurrency),
                _fmt(cell.relay("p50"), 3),
                _fmt(cell.relay("p90"), 3),
                _fmt(cell.relay("p99"), 3),
                str(messages),
                _fmt(cell.latency(), 1) + _errors(cell),
            ]
        )
    lines = []
    if rows:
        lines += [
            "## StreamPredictions: relay latency per intermediate message (handler send → client receive)",
            "",
        ]
        lines += table(["server", "C", "p50 ms", "p90 ms", "p99 ms", "messages", "whole call p50 ms"], rows)
    held = of_kind(records, "held_streams")
    if held:
        lines += ["Concurrent streams held open (gateway RSS):", ""]
        lines += table(
            [
                "streams",
                "open when measured",
                "ended early",
                "gateway RSS idle MiB",
                "gateway RSS holding them MiB",
            ],
            [
                [
                    str(r.get("streams")),
                    str(r.get("still_open")),
                    ", ".join(f"{k} {v}" for k, v in (r.get("ended_early") or {}).items()) or "\N{EN DASH}",
                    _num(r.get("gateway_rss_idle_mib"), 1),
                    _num(r.get("gateway_rss_mib"), 1),
                ]
                for r in held
            ],
        )
    return lines


def lifecycle(records: list[Record]) -> list[str]:
    rows = []
    for server in ("sluice", "torchserve"):
        cold = of_kind(records, "cold_start", server=server)
        if cold:
            rows.append(
                [
                    server,
                    "cold start → Ping healthy (no models)",
                    spread(r.get("to_healthy_s") for r in cold).format(2),
                ]
            )
            rows.append(
                [
                    server,
                    "cold start → start command done",
                    spread(r.get("to_ready_s") for r in cold).format(2),
                ]
            )
        methods = sorted({r.get("method") for r in of_kind(records, "register", server=server)})
        for method in methods:
            chosen = of_kind(records, "register", server=server, method=method)
            rows.append(
                [
                    server,
                    f"register → READY and predicting ({method})",
                    spread(r.get("to_ready_s") for r in chosen).format(2),
                ]
            )
    if not rows:
        return []
    return [
        "## Start and registration (seconds, median [min\N{EN DASH}max])",
        "",
        *table(["server", "measure", "s"], rows),
        "`startup`: `start --models mlp_b1_w1.mar` until the first successful Predictions, less the "
        "same server's median cold start (used where a server has no management API). "
        "`grpc management API`: UnregisterModel, then RegisterModel(synchronous, 1 worker) until it "
        "predicts.",
        "",
    ]


def memory(records: list[Record]) -> list[str]:
    lines = ["## Memory (RSS, MiB)", ""]
    rows = []
    for r in of_kind(records, "cold_start"):
        rows.append([r["server"], "idle, no models", _roles(r.get("rss_idle_mib") or {})])
    for r in of_kind(records, "rss", phase="idle"):
        rows.append([r["server"], f"idle, group {r.get('group')}", _roles(r.get("rss_mib") or {})])
    peaks: dict[tuple[str, str], dict[str, float]] = {}
    for r in records:
        if r.get("kind") == "load":
            peak = peaks.setdefault((r["server"], r.get("group", "")), {})
            for role, mib in (r.get("rss_max_mib") or {}).items():
                peak[role] = max(mib, peak.get(role, 0.0))
    for (server, group), peak in sorted(peaks.items()):
        rows.append([server, f"peak under load, group {group}", _roles(peak)])
    lines += table(["server", "when", "RSS by process"], rows)
    soak = of_kind(records, "redis_memory")
    if soak:
        lines += ["Redis memory before/after a sustained run (must be flat):", ""]
        lines += table(
            [
                "run s",
                "used_memory before",
                "after",
                "delta bytes",
                "keys before → after",
                "stream entries after",
            ],
            [
                [
                    _num(r.get("duration_s"), 0),
                    str(r["before"]["used_memory"]),
                    str(r["after"]["used_memory"]),
                    str(r.get("delta_used_memory")),
                    f"{r['before']['dbsize']} → {r['after']['dbsize']}",
                    str(r["after"]["stream_entries"]),
                ]
                for r in soak
            ],
        )
    return lines


def _roles(rss: dict[str, float]) -> str:
    return (
        ", ".join(f"{role} {mib:.0f}" for role, mib in sorted(rss.items()) if role != "client")
        or "\N{EN DASH}"
    )


def cost_curves(cells: Cells) -> list[str]:
    lines = []
    rows = []
    for server in ("sluice", "torchserve"):
        for cell in cells.select(section="queue_depth", server=server):
            p50 = cell.latency().median
            rows.append(
                [
                    server,
                    str(cell.key.concurrency),
                    _fmt(_thr(cell), 0) + _errors(cell),
                    _fmt(cell.latency(), 2),
                    _fmt(cell.latency("p99"), 2),
                    _num(p50 / cell.key.concurrency, 3),
                ]
            )
    if rows:
        lines += ["## Cost curve: latency as queue depth grows (closed loop, depth ≈ C; mlp_b1_w1)", ""]
        lines += table(
            ["server", "queued (C)", "req/s", "p50 ms", "p99 ms", "p50 ms per queued request"], rows
        )
    idle_rows = []
    for cell in cells.select(section="idle_models", server="sluice"):
        idle_rows.append(
            [
                str(cell.key.idle_models),
                str(cell.key.concurrency),
                _fmt(_thr(cell), 0) + _errors(cell),
                _fmt(cell.latency(), 2),
            ]
        )
    if idle_rows:
        lines += ["Throughput with idle registered models (Sluice, mlp_b1_w1):", ""]
        lines += table(["idle models", "C", "req/s", "p50 ms"], idle_rows)
    return lines


def cpu(cells: Cells) -> list[str]:
    rows = []
    for cell in cells.cells.values():
        key = cell.key
        if (
            key.section not in ("matrix", "pinning")
            or key.api != "predictions"
            or key.concurrency not in (1, 64)
        ):
            continue
        if not key.variant.startswith("mlp") or (
            key.section == "matrix" and key.variant not in ("mlp_b1_w1", "mlp_b8_w1_eager", "mlp_b8_w1_fill")
        ):
            continue
        roles = (
            ["client", "gateway", "redis", "worker"]
            if key.server == "sluice"
            else ["client", "frontend", "worker"]
        )
        shares = ", ".join(f"{role} {cell.cpu_ms(role).median:.3f}" for role in roles)
        foreign = spread(r.get("foreign_cores") for r in cell.records)
        rows.append(
            [
                key.server,
                key.variant,
                str(key.concurrency),
                "pinned (taskset)" if key.pin_client else ("unpinned" if key.section == "pinning" else ""),
                _fmt(_thr(cell), 0),
                shares,
                foreign.format(2),
            ]
        )
    if not rows:
        return []
    rows.sort()
    return [
        "## Where the CPU goes (CPU-ms per request by process)",
        "",
        *table(
            [
                "server",
                "archive",
                "C",
                "client placement",
                "req/s",
                "CPU-ms/request",
                "other processes (cores)",
            ],
            rows,
        ),
    ]


def targets_section(records: list[Record]) -> list[str]:
    rows = [[o.target, o.goal, o.measured, o.verdict] for o in evaluate(records)]
    return ["## Targets", "", *table(["target", "goal", "measured (this run)", "verdict"], rows)]


def profiles(records: list[Record]) -> list[str]:
    found = of_kind(records, "profile")
    if not found:
        return []
    lines = [
        "## Profiles (py-spy --native, share of each process's busy samples)",
        "",
        "Samples whose leaf is a wait (epoll, futex, unresolved libc addresses) are left out; "
        "`CPU-s` is busy samples / sampling rate. Raw stacks are in `profiles/`.",
        "",
    ]
    for r in found:
        top = "; ".join(f"{frame} {share * 100:.0f}%" for frame, share in (r.get("self") or [])[:8])
        by_file = "; ".join(f"{name} {share * 100:.0f}%" for name, share in (r.get("self_by_file") or [])[:8])
        inclusive = "; ".join(
            f"{frame} {share * 100:.0f}%" for frame, share in (r.get("inclusive") or [])[:8]
        )
        lines += [
            f"- **{r.get('role')}** — {r.get('variant')} C={r.get('concurrency')}, "
            f"{_num(r.get('cpu_s_estimate'), 2)} CPU-s sampled",
            f"  - self, by file/library: {by_file}",
            f"  - self: {top}",
            f"  - inclusive: {inclusive}",
        ]
    return [*lines, ""]


def errors(records: list[Record]) -> list[str]:
    found = of_kind(records, "error")
    if not found:
        return []
    rows = [
        [
            r.get("step", ""),
            f"{r.get('server', '')} {r.get('api', '')} {r.get('variant', '')} C={r.get('concurrency', '')}",
            str(r.get("error", "")).replace("\n", " ")[:300],
        ]
        for r in found
    ]
    return ["## Errors and skipped steps", "", *table(["step", "cell", "error"], rows)]


def render(records: list[Record], plots: list[str] | None = None) -> str:
    cells = Cells(records)
    lines = ["# Sluice benchmark report", ""]
    lines += targets_section(records)
    lines += environment(records)
    lines += inprocess(records)
    for model in ("mlp", "cnn"):
        lines += matrix(records, cells, model)
    lines += native(cells)
    lines += protocols(cells)
    lines += streaming(records, cells)
    lines += lifecycle(records)
    lines += memory(records)
    lines += cost_curves(cells)
    lines += cpu(cells)
    lines += profiles(records)
    lines += errors(records)
    if plots:
        lines += ["## Plots", ""] + [f"![{name}](plots/{name})" for name in plots] + [""]
    return "\n".join(lines)


def write(directory: Path) -> Path:
    """Write ``report.md`` and ``plots/`` for the run in ``directory``."""
    records: list[dict[str, Any]] = read(directory / RESULTS_FILE)
    from bench import plots, profiling

    for record in records:
        if record.get("kind") == "profile":
            raw = (
                directory
                / "profiles"
                / profiling.file_name(record["variant"], record["concurrency"], record["role"])
            )
            if raw.is_file():
                record.update(profiling.summarize(raw))  # summaries follow the current reduction rules

    try:
        names = plots.write_all(records, directory / "plots")
    except Exception as exc:  # a plotting problem must not cost the tables
        names = []
        records.append({"kind": "error", "step": "plots", "error": str(exc)})
    path = directory / REPORT_FILE
    path.write_text(render(records, names), encoding="utf-8")
    return path
