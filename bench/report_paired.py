"""The report's tables of paired rounds: C=1 latency of batching off against the eager policy, the
CNN at saturation against the in-process limit measured in alternation with it, and Sluice against
TorchServe head to head."""

import math
from typing import Any

from bench import head_to_head
from bench.cells import Cell, Cells, Record, inprocess_limit, of_kind
from bench.report_format import error_mark, fmt, num, section, throughput
from bench.stats import Spread, ratio
from bench.targets import C1_LATENCY_GOAL

TIMES = "\N{MULTIPLICATION SIGN}"
API_NAMES = {"predictions": "TorchServe gRPC", "kserve": "KServe v2 raw"}


def paired(cells: Cells) -> list[str]:
    rows = [
        [
            cell.key.variant,
            str(len(cell.records)),
            fmt(cell.latency(), 2) + error_mark(cell),
            ", ".join(
                num((r.get("latency_ms") or {}).get("p50"), 2)
                for r in sorted(cell.records, key=lambda r: int(r.get("rep", 0)))
            ),
        ]
        for cell in cells.select(section="paired", server="sluice", model="mlp")
    ]
    return section(
        "Batching at low load: paired C=1 rounds",
        ["archive", "rounds", "p50 ms", "p50 ms by round"],
        rows,
        "Batching off and the eager policy alternate (A B, B A, ...) on one server start, so drift "
        "and background work fall on both alike; the eager target compares these medians.",
    )


def paired_saturation(records: list[Record], cells: Cells) -> list[str]:
    rows = []
    for cell in cells.select(section="paired", server="sluice", model="cnn"):
        group = cell.first.get("group")
        windows = {
            int(r.get("rep", 0)): r.get("inferences_per_s")
            for r in of_kind(records, "inprocess", group=group)
        }
        by_round = {int(r.get("rep", 0)): r.get("throughput_rps") for r in cell.records}
        limit = inprocess_limit(records, "cnn", 8, group=group)
        rows.append(
            [
                cell.key.variant,
                API_NAMES.get(cell.key.api, cell.key.api),
                str(cell.key.concurrency),
                str(len(cell.records)),
                fmt(throughput(cell), 1) + error_mark(cell),
                limit.format(1),
                num(ratio(cell.throughput().median, limit.median) * 100, 0, "%"),
                ", ".join(
                    num(ratio(_number(by_round[round_]), _number(windows.get(round_))) * 100, 0, "%")
                    for round_ in sorted(by_round)
                ),
            ]
        )
    return section(
        "CNN at saturation: paired rounds with the in-process limit",
        ["archive", "API", "C", "rounds", "Sluice req/s", "limit inf/s", "ratio", "ratio by round"],
        rows,
        "The archive at saturation (TorchServe gRPC, and KServe v2 with raw FP32 tensors handed to the "
        "handler as torch tensors) and the in-process limit at its batch size alternate (A B C, C B A, "
        "...) on one server start, the server idle during the limit's windows; the CNN target "
        "compares the TorchServe gRPC medians.",
    )


def head_to_head_table(cells: Cells) -> list[str]:
    rows = []
    # (what is compared, client, the C=1 cell or the best one)
    for label, client, at_c1 in (
        ("p50 ms at C=1", "python", True),
        ("best req/s, python client", "python", False),
        ("best req/s, h2load", "h2load", False),
    ):
        sluice = _head_to_head_cell(cells, "sluice", client, at_c1)
        torchserve = _head_to_head_cell(cells, "torchserve", client, at_c1)
        if sluice is None or torchserve is None:
            continue
        floor = _head_to_head_cell(cells, head_to_head.FLOOR, client, at_c1)
        measure = _p50 if at_c1 else _req_per_s
        by_round = {int(r.get("rep", 0)): measure(r) for r in torchserve.records}
        digits = 2 if at_c1 else 0
        ts_median = _spread(torchserve, at_c1).median
        rows.append(
            [
                label,
                f"{sluice.key.variant}, C={sluice.key.concurrency}",
                _spread(sluice, at_c1).format(digits) + error_mark(sluice),
                f"{torchserve.key.variant}, C={torchserve.key.concurrency}",
                _spread(torchserve, at_c1).format(digits) + error_mark(torchserve),
                num(ratio(_spread(sluice, at_c1).median, ts_median), 2, TIMES),
                ", ".join(
                    num(ratio(measure(r), by_round.get(int(r.get("rep", 0)), math.nan)), 2, TIMES)
                    for r in sorted(sluice.records, key=lambda r: int(r.get("rep", 0)))
                ),
                (_spread(floor, at_c1).format(digits) + error_mark(floor)) if floor else "\N{EN DASH}",
                num(ratio(_spread(floor, at_c1).median, ts_median), 2, TIMES) if floor else "\N{EN DASH}",
            ]
        )
    lines = section(
        "Head to head: Sluice and TorchServe in alternating rounds, the gRPC floor beside them",
        [
            "measure",
            "Sluice cell",
            "Sluice",
            "TorchServe cell",
            "TorchServe",
            "S/TS",
            "S/TS by round",
            "gRPC floor",
            "floor/TS",
        ],
        rows,
        "After all groups both servers run at once, each with the archives of its own cells: batching "
        "off at C=1, and its best matrix cell for each client (a server whose groups this preset "
        "does not run gets batch 8, one worker, C=64: TorchServe's best in every full run so far). "
        "Each round runs one server's cells, "
        "then the other's (A B, B A, ...), so drift over the run falls on both alike; the latency and "
        "throughput targets compare these medians. The gRPC floor runs Sluice's cells in the same "
        "rounds: a grpc.aio server with the gateway's settings that answers every call at once with "
        "Sluice's answer (no Redis, no worker, no model). No gateway built on grpc.aio answers faster "
        "or serves more than it; where the floor/TS column misses a target, so must Sluice.",
    )
    budget = _c1_budget(cells)
    # The table ends with a blank line; the budget follows it as a paragraph.
    return [*lines, budget, ""] if lines and budget else lines


def _c1_budget(cells: Cells) -> str:
    """What each server spends at C=1 beyond the floor's p50, and what the latency goal leaves."""
    found = [_head_to_head_cell(cells, server, "python", True) for server in head_to_head.ROUND_SERVERS]
    if not all(found):
        return ""
    sluice, torchserve, floor = (cell.latency().median for cell in found if cell)
    return (
        f"At C=1 Sluice's path behind the gateway's gRPC (its p50 less the floor's) takes "
        f"{num(sluice - floor, 2, ' ms')}, and TorchServe's whole call "
        f"{num(torchserve - floor, 2, ' ms')} more than the floor's; the goal "
        f"(≤ {C1_LATENCY_GOAL:.2f}{TIMES} TorchServe) leaves "
        f"{num(C1_LATENCY_GOAL * torchserve - floor, 2, ' ms')} for everything behind the gRPC: the "
        "enqueue, Redis both ways, the worker, the handler and the reply."
    )


def _spread(cell: Cell, at_c1: bool) -> Spread:
    return cell.latency() if at_c1 else cell.throughput()


def _p50(record: Record) -> float:
    return _number((record.get("latency_ms") or {}).get("p50"))


def _req_per_s(record: Record) -> float:
    return _number(record.get("throughput_rps"))


def _head_to_head_cell(cells: Cells, server: str, client: str, at_c1: bool) -> Cell | None:
    for cell in cells.select(section=head_to_head.SECTION, server=server, client=client):
        if (cell.key.concurrency == 1) == at_c1:
            return cell
    return None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan
