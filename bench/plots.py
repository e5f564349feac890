"""PNG plots of a run: throughput vs concurrency, latency percentiles, streaming relay latency and the
queue-depth curve; for ``make bench-autoscale``, worker count and p99 over time. Matplotlib's Agg
backend (no display)."""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.autoscale_analysis import WINDOW_S, Run, windows
from bench.cells import Cells, Record

COLORS = {"sluice": "tab:blue", "torchserve": "tab:orange"}
STYLES = ["-", "--", ":", "-.", (0, (3, 1, 1, 1)), (0, (5, 5))]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput_vs_concurrency(cells: Cells, model: str, path: Path) -> bool:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    drawn = False
    for server in ("sluice", "torchserve"):
        variants = sorted(
            {
                c.key.variant
                for c in cells.select(section="matrix", server=server, api="predictions")
                if c.first.get("model") == model
            }
        )
        for index, variant in enumerate(variants):
            series = cells.select(
                section="matrix", server=server, api="predictions", client="python", variant=variant
            )
            if not series:
                continue
            xs = [c.key.concurrency for c in series]
            spreads = [c.throughput() for c in series]
            ys = [s.median for s in spreads]
            err = [[s.median - s.low for s in spreads], [s.high - s.median for s in spreads]]
            ax.errorbar(
                xs,
                ys,
                yerr=err,
                label=f"{server} {variant}",
                color=COLORS[server],
                linestyle=STYLES[index % len(STYLES)],
                marker="o",
                capsize=3,
            )
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (closed loop)")
    ax.set_ylabel("requests/s (median, min\N{EN DASH}max)")
    ax.set_title(f"{model}: throughput vs concurrency (gRPC Predictions)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def latency_percentiles(cells: Cells, model: str, path: Path) -> bool:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.5), sharey=False)
    drawn = False
    for axis, name in zip(axes, ("p50", "p90", "p99"), strict=True):
        for server in ("sluice", "torchserve"):
            variants = sorted(
                {
                    c.key.variant
                    for c in cells.select(section="matrix", server=server, api="predictions")
                    if c.first.get("model") == model
                }
            )
            for index, variant in enumerate(variants):
                series = cells.select(
                    section="matrix", server=server, api="predictions", client="python", variant=variant
                )
                if series:
                    axis.plot(
                        [c.key.concurrency for c in series],
                        [c.latency(name).median for c in series],
                        color=COLORS[server],
                        linestyle=STYLES[index % len(STYLES)],
                        marker="o",
                        label=f"{server} {variant}",
                    )
                    drawn = True
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(f"{model} {name} latency (ms)")
        axis.set_xlabel("concurrency")
        axis.grid(True, alpha=0.3)
    if not drawn:
        plt.close(fig)
        return False
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def stream_relay(records: list[Record], path: Path) -> bool:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for server in ("sluice", "torchserve"):
        for concurrency in sorted(
            {r["concurrency"] for r in records if r.get("kind") == "load" and r.get("api") == "stream"}
        ):
            sample = sorted(
                v
                for r in records
                if r.get("kind") == "load"
                and r.get("api") == "stream"
                and r.get("server") == server
                and r.get("concurrency") == concurrency
                for v in r.get("relay_sample_ms") or []
            )
            if not sample:
                continue
            ys = [(index + 1) / len(sample) for index in range(len(sample))]
            ax.plot(
                sample,
                ys,
                color=COLORS[server],
                linestyle="-" if concurrency == 1 else "--",
                label=f"{server} C={concurrency}",
            )
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("relay latency per message, ms (handler send → client receive)")
    ax.set_ylabel("fraction of messages")
    ax.set_title("StreamPredictions relay latency (CDF)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def queue_depth(cells: Cells, path: Path) -> bool:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for server in ("sluice", "torchserve"):
        series = cells.select(section="queue_depth", server=server)
        if series:
            ax.plot(
                [c.key.concurrency for c in series],
                [c.latency().median for c in series],
                marker="o",
                color=COLORS[server],
                label=f"{server} p50",
            )
            ax.plot(
                [c.key.concurrency for c in series],
                [c.latency("p99").median for c in series],
                marker=".",
                color=COLORS[server],
                linestyle="--",
                label=f"{server} p99",
            )
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("requests queued (closed-loop concurrency)")
    ax.set_ylabel("latency ms")
    ax.set_title("Latency as queue depth grows (mlp_b1_w1)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def autoscale_timeline(runs: Sequence[Run], configs: Sequence[str], path: Path) -> bool:
    """Live workers (top; the autoscaler's desired count dashed) and p99 per window (bottom, log
    scale) over the step load, one colour per configuration; the first round thick, later rounds
    thin."""
    if not runs:
        return False
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, height_ratios=(1, 2))
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for index, config in enumerate(configs):
        for run in (run for run in runs if run.config == config):
            first = run.round == min(r.round for r in runs if r.config == config)
            style = {"color": palette[index % len(palette)], "linewidth": 1.8 if first else 0.8}
            label = config if first else None
            top.step([s.at_s for s in run.samples], [s.workers for s in run.samples], where="post", **style)
            if first and any(s.desired is not None and s.desired != s.workers for s in run.samples):
                wanted = [s for s in run.samples if s.desired is not None]
                top.step(
                    [s.at_s for s in wanted],
                    [s.desired for s in wanted],
                    where="post",
                    color=style["color"],
                    linewidth=0.9,
                    linestyle="--",
                )
            shown = [w for w in windows(run.calls, run.end_s) if w.calls and math.isfinite(w.p99_s)]
            bottom.plot(
                [w.start_s + WINDOW_S / 2 for w in shown],
                [w.p99_s * 1e3 for w in shown],
                label=label,
                **style,
            )
    run = runs[0]
    for axis in (top, bottom):
        axis.axvspan(run.step_up_s, run.step_down_s, color="grey", alpha=0.12)
        axis.grid(True, alpha=0.3)
    rates = " → ".join(f"{phase.rate_per_s:.1f}" for phase in run.phases)
    top.set_ylabel("live workers\n(desired dashed)")
    top.yaxis.get_major_locator().set_params(integer=True)
    top.set_title(f"Open-loop step load, {rates} req/s (high phase shaded)")
    bottom.set_yscale("log")
    bottom.set_ylabel(f"p99 latency per {WINDOW_S:g} s window (ms)")
    bottom.set_xlabel("seconds from the start of the load")
    bottom.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_all(records: list[Record], directory: Path) -> list[str]:
    """Every plot the records allow; returns the file names written."""
    directory.mkdir(parents=True, exist_ok=True)
    cells = Cells(records)
    written = []
    for model in ("mlp", "cnn"):
        name = f"throughput_vs_concurrency_{model}.png"
        if throughput_vs_concurrency(cells, model, directory / name):
            written.append(name)
        name = f"latency_percentiles_{model}.png"
        if latency_percentiles(cells, model, directory / name):
            written.append(name)
    if stream_relay(records, directory / "stream_relay.png"):
        written.append("stream_relay.png")
    if queue_depth(cells, directory / "queue_depth.png"):
        written.append("queue_depth.png")
    return written
