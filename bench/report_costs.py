"""The report's cost sections: start and registration, memory, cost curves, CPU per request,
profiles and errors. Pure functions of the records."""

from bench.cells import Cells, Record, of_kind
from bench.report_format import error_mark, fmt, num, section, table, throughput
from bench.stats import spread


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
        methods = sorted({str(r.get("method")) for r in of_kind(records, "register", server=server)})
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
        rows.append([r["server"], "idle, no models", roles(r.get("rss_idle_mib") or {})])
    for r in of_kind(records, "rss", phase="idle"):
        rows.append([r["server"], f"idle, group {r.get('group')}", roles(r.get("rss_mib") or {})])
    peaks: dict[tuple[str, str], dict[str, float]] = {}
    for r in records:
        if r.get("kind") == "load":
            peak = peaks.setdefault((r["server"], r.get("group", "")), {})
            for role, mib in (r.get("rss_max_mib") or {}).items():
                peak[role] = max(mib, peak.get(role, 0.0))
    for (server, group), peak in sorted(peaks.items()):
        rows.append([server, f"peak under load, group {group}", roles(peak)])
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
                    num(r.get("duration_s"), 0),
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


def roles(rss: dict[str, float]) -> str:
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
                    fmt(throughput(cell), 0) + error_mark(cell),
                    fmt(cell.latency(), 2),
                    fmt(cell.latency("p99"), 2),
                    num(p50 / cell.key.concurrency, 3),
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
                fmt(throughput(cell), 0) + error_mark(cell),
                fmt(cell.latency(), 2),
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
                fmt(throughput(cell), 0),
                shares,
                cell.redis_commands().format(1) if key.server == "sluice" else "0 (no broker)",
                foreign.format(2),
            ]
        )
    return section(
        "Where the CPU goes (CPU-ms per request by process)",
        [
            "server",
            "archive",
            "C",
            "client placement",
            "req/s",
            "CPU-ms/request",
            "Redis commands/request",
            "other processes (cores)",
        ],
        sorted(rows),
    )


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
            f"{num(r.get('cpu_s_estimate'), 2)} CPU-s sampled",
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
