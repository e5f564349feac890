"""``report.md`` from a run's ``results.jsonl``: tables with medians and min-max of the repetitions,
the ratios Sluice/TorchServe and Sluice/in-process for each cell, the targets, the profiles, and the
plots (``plots/*.png``). ``render`` is pure; ``write`` does the file I/O."""

from pathlib import Path
from typing import Any

from bench.cells import Cells, Record, inprocess_limit, of_kind
from bench.report_costs import cost_curves, cpu, errors, lifecycle, memory, profiles
from bench.report_format import error_mark, fmt, num, ratio_of, section, table, throughput
from bench.report_paired import head_to_head_table, paired, paired_saturation
from bench.results import RESULTS_FILE, read
from bench.stats import spread
from bench.targets import evaluate

REPORT_FILE = "report.md"


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
                for r in of_kind(records, "inprocess", model=model, batch=batch, group=None)
            )
            threads = {
                str(r.get("threads"))
                for r in of_kind(records, "inprocess", model=model, batch=batch, group=None)
            }
            rows.append([model, str(batch), limit.format(0), p50.format(3), ",".join(sorted(threads))])
    return section(
        "In-process limit (handler called in a loop)",
        ["model", "batch", "inferences/s", "ms per call (p50)", "torch threads"],
        rows,
    )


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
            either = s or t
            first = either.first if either else {}
            limit = limits[8 if first.get("batching", "off") != "off" else 1]
            rows.append(
                [
                    variant,
                    str(concurrency),
                    fmt(throughput(s), 0) + error_mark(s),
                    fmt(s.latency() if s else None, 2),
                    fmt(s.latency("p99") if s else None, 2),
                    fmt(throughput(t), 0) + error_mark(t),
                    fmt(t.latency() if t else None, 2),
                    fmt(t.latency("p99") if t else None, 2),
                    ratio_of(throughput(s), throughput(t)),
                    ratio_of(s.latency() if s else None, t.latency() if t else None),
                    ratio_of(throughput(s), limit),
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
                fmt(throughput(cell), 0) + error_mark(cell),
                fmt(cell.latency(), 2),
                ratio_of(throughput(cell), throughput(base)),
                ratio_of(throughput(cell), throughput(other)),
            ]
        )
    return section(
        "Other APIs: KServe v2 `ModelInfer` (raw tensors), REST `/predictions`",
        ["server", "api", "archive", "C", "req/s", "p50 ms", "vs Predictions", "S/TS"],
        rows,
    )


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
                fmt(throughput(cell), 0) + error_mark(cell),
                mean.format(2),
                ratio_of(throughput(cell), throughput(python)),
                ratio_of(throughput(cell), throughput(other)) if key.server == "sluice" else "",
            ]
        )
    return section(
        "Native load generator (h2load, pre-framed gRPC `Predictions`, one connection)",
        ["server", "archive", "C", "req/s", "mean ms", "vs Python client", "S/TS"],
        rows,
        "h2load reports mean latency, not percentiles; it cannot see gRPC status trailers, so each "
        "payload was first checked with the Python client in the same run.",
    )


def streaming(records: list[Record], cells: Cells) -> list[str]:
    rows = []
    for cell in cells.select(api="stream"):
        messages = sum(r.get("messages", 0) for r in cell.records)
        rows.append(
            [
                cell.key.server,
                str(cell.key.concurrency),
                fmt(cell.relay("p50"), 3),
                fmt(cell.relay("p90"), 3),
                fmt(cell.relay("p99"), 3),
                str(messages),
                fmt(cell.latency(), 1) + error_mark(cell),
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
                    num(r.get("gateway_rss_idle_mib"), 1),
                    num(r.get("gateway_rss_mib"), 1),
                ]
                for r in held
            ],
        )
    return lines


def targets_section(records: list[Record]) -> list[str]:
    rows = [[o.target, o.goal, o.measured, o.verdict] for o in evaluate(records)]
    return ["## Targets", "", *table(["target", "goal", "measured (this run)", "verdict"], rows)]


def render(records: list[Record], plots: list[str] | None = None) -> str:
    cells = Cells(records)
    lines = ["# Sluice benchmark report", ""]
    lines += targets_section(records)
    lines += environment(records)
    lines += inprocess(records)
    for model in ("mlp", "cnn"):
        lines += matrix(records, cells, model)
    lines += head_to_head_table(cells)
    lines += paired(cells)
    lines += paired_saturation(records, cells)
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
