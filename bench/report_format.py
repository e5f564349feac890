"""Formatting helpers the report's sections share: Markdown tables and number cells."""

import math
from collections.abc import Iterable

from bench.cells import Cell
from bench.stats import Spread, ratio


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def section(title: str, header: list[str], rows: list[list[str]], intro: str = "") -> list[str]:
    """``## title``, an optional paragraph, then the table; nothing at all without rows."""
    if not rows:
        return []
    return [f"## {title}", "", *([intro, ""] if intro else []), *table(header, rows)]


def num(value: float | None, digits: int = 2, unit: str = "") -> str:
    return (
        "\N{EN DASH}"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:,.{digits}f}{unit}"
    )


def ratio_of(numerator: Spread | None, denominator: Spread | None) -> str:
    if numerator is None or denominator is None:
        return "\N{EN DASH}"
    return num(ratio(numerator.median, denominator.median), 2, "\N{MULTIPLICATION SIGN}")


def throughput(cell: Cell | None) -> Spread | None:
    return cell.throughput() if cell else None


def fmt(value: Spread | None, digits: int = 1) -> str:
    return value.format(digits) if value is not None else "\N{EN DASH}"


def error_mark(cell: Cell | None) -> str:
    if cell is None:
        return ""
    count = cell.errors()
    return f" ⚠{count} err" if count else ""
