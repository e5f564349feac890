"""The issue's targets, evaluated on one run's records (ratios measured in the same run)."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import head_to_head
from bench.cells import Cell, Cells, Record, inprocess_limit, of_kind
from bench.stats import ratio, spread

TIMES = "\N{MULTIPLICATION SIGN}"
# The goals as the hot-path issue restated them (ratios in the same head-to-head rounds): at C=1
# Sluice's p50 at most TorchServe's (parity while carrying a broker hop TorchServe lacks) and its p99
# at most 0.8 of TorchServe's; its best throughput 1.25x TorchServe's with the Python client and 1.6x
# with h2load; the CNN at saturation 95% of the in-process limit.
C1_LATENCY_GOAL = 1.00
C1_P99_GOAL = 0.80
BEST_THROUGHPUT_GOALS = {"python": 1.25, "h2load": 1.60}
CNN_SATURATION_GOAL = 0.95


@dataclass(frozen=True)
class Outcome:
    target: str
    goal: str
    measured: str
    # The number compared with the goal, and whether lower or higher is better.
    value: float
    limit: float
    lower_is_better: bool

    @property
    def passed(self) -> bool | None:
        if math.isnan(self.value):
            return None
        return self.value <= self.limit if self.lower_is_better else self.value >= self.limit

    @property
    def verdict(self) -> str:
        if self.passed is None:
            return "not measured"
        if self.passed:
            return "met"
        return f"missed by {self.miss_percent:.0f}%"

    @property
    def miss_percent(self) -> float:
        """How far the value is from the goal, in percent of the goal (0 when met)."""
        if self.passed is not False or self.limit == 0:
            return 0.0
        return abs(self.value - self.limit) / abs(self.limit) * 100.0


def _fmt(value: float, unit: str = "", digits: int = 2) -> str:
    return "\N{EN DASH}" if math.isnan(value) else f"{value:,.{digits}f}{unit}"


def _rounds(found: list[Cell | None]) -> int:
    return min(len(cell.records) for cell in found if cell is not None)


def _how(rounds: int) -> str:
    return f", {rounds} head-to-head rounds" if rounds else ""


def _floor_note(floor: float, torchserve: float, unit: str, digits: int) -> str:
    """The gRPC floor beside a head-to-head measure: what no grpc.aio gateway can beat."""
    return (
        f"; the gRPC floor (a grpc.aio server that answers at once) {_fmt(floor, unit, digits)}"
        f" = {_fmt(ratio(floor, torchserve), TIMES)} TorchServe"
    )


def mlp_c1(percentile: str, goal: float) -> Callable[[Cells, list[Record]], Outcome]:
    def evaluate(cells: Cells, _records: list[Record]) -> Outcome:
        # The head-to-head rounds when the run has them, else the matrix.
        for section in (head_to_head.SECTION, "matrix"):
            found = [
                cells.get(
                    section=section,
                    server=server,
                    api="predictions",
                    variant=head_to_head.BASE_VARIANT,
                    concurrency=1,
                )
                for server in head_to_head.SERVERS
            ]
            if all(found):
                break
        rounds = _rounds(found) if section == head_to_head.SECTION and all(found) else 0
        values = [cell.latency(percentile).median if cell else math.nan for cell in found]
        value = ratio(values[0], values[1])
        floor = cells.get(
            section=head_to_head.SECTION,
            server=head_to_head.FLOOR,
            api="predictions",
            variant=head_to_head.BASE_VARIANT,
            concurrency=1,
        )
        floor_note = (
            _floor_note(floor.latency(percentile).median, values[1], " ms", 2) if rounds and floor else ""
        )
        return Outcome(
            f"mlp {percentile} latency at C=1 (Predictions, batching off, 1 worker)",
            f"≤ {goal:.2f}{TIMES} TorchServe",
            f"Sluice {_fmt(values[0], ' ms')} vs TorchServe {_fmt(values[1], ' ms')} = {_fmt(value, TIMES)}"
            f"{_how(rounds)}{floor_note}",
            value,
            goal,
            True,
        )

    return evaluate


def mlp_best(client: str) -> Callable[[Cells, list[Record]], Outcome]:
    def evaluate(cells: Cells, _records: list[Record]) -> Outcome:
        # The head-to-head rounds when the run has them for this client, else the matrix.
        for section in (head_to_head.SECTION, dict(head_to_head.BEST_OF)[client]):
            found = [
                cells.best_throughput(
                    section=section, server=server, api="predictions", client=client, model="mlp"
                )
                for server in head_to_head.SERVERS
            ]
            if all(cell for _value, cell in found):
                break
        (s_value, s_cell), (t_value, t_cell) = found
        rounds = _rounds([s_cell, t_cell]) if section == head_to_head.SECTION and s_cell and t_cell else 0
        value = ratio(s_value, t_value)
        f_value, f_cell = cells.best_throughput(
            section=head_to_head.SECTION,
            server=head_to_head.FLOOR,
            api="predictions",
            client=client,
            model="mlp",
        )
        floor_note = _floor_note(f_value, t_value, " req/s", 0) if rounds and f_cell else ""

        def where(cell: Any) -> str:
            return f" ({cell.key.variant}, C={cell.key.concurrency})" if cell else ""

        return Outcome(
            f"best mlp throughput, {client} client",
            f"≥ {BEST_THROUGHPUT_GOALS[client]:.2f}{TIMES} TorchServe's best",
            f"Sluice {_fmt(s_value, ' req/s', 0)}{where(s_cell)} vs TorchServe {_fmt(t_value, ' req/s', 0)}"
            f"{where(t_cell)} = {_fmt(value, TIMES)}{_how(rounds)}{floor_note}",
            value,
            BEST_THROUGHPUT_GOALS[client],
            False,
        )

    return evaluate


def cnn_saturation(workers: int) -> Callable[[Cells, list[Record]], Outcome]:
    def evaluate(cells: Cells, records: list[Record]) -> Outcome:
        # The paired rounds (each alternating with in-process windows) when the run has them.
        paired = _cnn_paired(cells, records, workers)
        if paired is not None:
            value, cell, limit = paired
            best = cell.throughput().median
            how = f", {len(cell.records)} paired rounds"
        else:
            best, cell = math.nan, None
            for candidate in _cnn_cells(cells, "matrix", workers):
                throughput = candidate.throughput().median
                if cell is None or throughput > best:
                    best, cell = throughput, candidate
            limit = inprocess_limit(records, "cnn", 8).median
            value = ratio(best, limit)
            how = ""
        where = f" ({cell.key.variant}, C={cell.key.concurrency})" if cell else ""
        return Outcome(
            f"CNN throughput at saturation, {workers} worker(s)",
            f"≥ {CNN_SATURATION_GOAL:.0%} of the in-process batch-8 limit",
            f"{_fmt(best, ' req/s', 1)}{where} vs limit {_fmt(limit, ' inf/s', 1)} "
            f"= {_fmt(value * 100, '%', 0)}{how}",
            value,
            CNN_SATURATION_GOAL,
            False,
        )

    return evaluate


def _cnn_cells(cells: Cells, section: str, workers: int) -> list[Cell]:
    return [
        cell
        for cell in cells.select(
            section=section, server="sluice", api="predictions", client="python", model="cnn"
        )
        if cell.first.get("workers") == workers and cell.errors() == 0
    ]


def _cnn_paired(cells: Cells, records: list[Record], workers: int) -> tuple[float, Cell, float] | None:
    """The best ratio among the paired CNN cells: (ratio, cell, the limit of its windows)."""
    best: tuple[float, Cell, float] | None = None
    for cell in _cnn_cells(cells, "paired", workers):
        limit = inprocess_limit(records, "cnn", 8, group=cell.first.get("group")).median
        value = ratio(cell.throughput().median, limit)
        if math.isfinite(value) and (best is None or value > best[0]):
            best = (value, cell, limit)
    return best


def batching_low_load(policy: str) -> Callable[[Cells, list[Record]], Outcome]:
    def evaluate(cells: Cells, _records: list[Record]) -> Outcome:
        # The paired rounds (alternating, one start) when the run has them, else the matrix cells.
        for section in ("paired", "matrix"):
            on = cells.get(
                section=section,
                server="sluice",
                api="predictions",
                variant=f"mlp_b8_w1_{policy}",
                concurrency=1,
            )
            off = cells.get(
                section=section, server="sluice", api="predictions", variant="mlp_b1_w1", concurrency=1
            )
            if on and off:
                break
        on_p50 = on.latency().median if on else math.nan
        off_p50 = off.latency().median if off else math.nan
        value = ratio(on_p50, off_p50)
        goal = "≤ 1.10\N{MULTIPLICATION SIGN} batching off" + (
            "" if policy == "eager" else " (informational: fill waits by design)"
        )
        how = f", {len(on.records)} paired rounds" if on and section == "paired" else ""
        return Outcome(
            f"batching on at C=1 costs no latency ({policy} policy, mlp)",
            goal,
            f"{_fmt(on_p50, ' ms')} vs {_fmt(off_p50, ' ms')} = {_fmt(value, TIMES)}{how}",
            value,
            1.10,
            True,
        )

    return evaluate


def stream_relay(cells: Cells, _records: list[Record]) -> Outcome:
    cell = cells.get(server="sluice", api="stream", variant="stream", concurrency=1)
    value = cell.relay().median if cell else math.nan
    return Outcome(
        "StreamPredictions relay p50 per intermediate message",
        "≤ 1 ms",
        _fmt(value, " ms", 3),
        value,
        1.0,
        True,
    )


def gateway_rss_idle(_cells: Cells, records: list[Record]) -> Outcome:
    value = spread(
        (r.get("rss_idle_mib") or {}).get("gateway") for r in of_kind(records, "cold_start", server="sluice")
    ).median
    return Outcome("gateway RSS idle", "≤ 60 MiB", _fmt(value, " MiB", 1), value, 60.0, True)


def gateway_rss_streams(_cells: Cells, records: list[Record]) -> Outcome:
    held = [r for r in of_kind(records, "held_streams", server="sluice") if r.get("streams", 0) >= 1000]
    value = spread(r.get("gateway_rss_mib") for r in held).median
    opened = spread(r.get("still_open") for r in held).median
    return Outcome(
        "gateway RSS holding 1,000 concurrent streams",
        "≤ 100 MiB",
        f"{_fmt(value, ' MiB', 1)} ({_fmt(opened, '', 0)} streams open when measured)",
        value,
        100.0,
        True,
    )


def cold_start(_cells: Cells, records: list[Record]) -> Outcome:
    value = spread(r.get("to_healthy_s") for r in of_kind(records, "cold_start", server="sluice")).median
    other = spread(r.get("to_healthy_s") for r in of_kind(records, "cold_start", server="torchserve")).median
    return Outcome(
        "cold start to Ping healthy, no models",
        "≤ 1 s",
        f"{_fmt(value, ' s')} (TorchServe {_fmt(other, ' s')})",
        value,
        1.0,
        True,
    )


def register_ready(_cells: Cells, records: list[Record]) -> Outcome:
    methods = {r.get("method") for r in of_kind(records, "register", server="sluice")}
    method = "grpc management API" if "grpc management API" in methods else "startup"
    sluice = spread(
        r.get("to_ready_s") for r in of_kind(records, "register", server="sluice", method=method)
    ).median
    ts = spread(
        r.get("to_ready_s") for r in of_kind(records, "register", server="torchserve", method=method)
    ).median
    value = ratio(sluice, ts)
    return Outcome(
        f"register-to-READY ({method})",
        "no slower than TorchServe (≤ 1.0\N{MULTIPLICATION SIGN})",
        f"Sluice {_fmt(sluice, ' s')} vs TorchServe {_fmt(ts, ' s')} = {_fmt(value, TIMES)}",
        value,
        1.0,
        True,
    )


EVALUATORS: list[Callable[[Cells, list[Record]], Outcome]] = [
    mlp_c1("p50", C1_LATENCY_GOAL),
    mlp_c1("p99", C1_P99_GOAL),
    mlp_best("python"),
    mlp_best("h2load"),
    cnn_saturation(1),
    cnn_saturation(2),
    batching_low_load("eager"),
    batching_low_load("fill"),
    stream_relay,
    gateway_rss_idle,
    gateway_rss_streams,
    cold_start,
    register_ready,
]


def evaluate(records: list[Record]) -> list[Outcome]:
    cells = Cells(records)
    return [evaluator(cells, records) for evaluator in EVALUATORS]
