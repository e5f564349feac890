"""The report's tables of paired rounds: C=1 latency of batching off against the eager policy, and
the CNN at saturation against the in-process limit measured in alternation with it."""

import math
from typing import Any

from bench.cells import Cells, Record, inprocess_limit, of_kind
from bench.report_format import error_mark, fmt, num, section, throughput
from bench.stats import ratio


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
        ["archive", "C", "rounds", "Sluice req/s", "limit inf/s", "ratio", "ratio by round"],
        rows,
        "The archive at saturation and the in-process limit at its batch size alternate (A B, B A, ...) "
        "on one server start, the server idle during the limit's windows; the CNN target compares "
        "these medians.",
    )


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan
