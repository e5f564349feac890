"""Load records grouped into cells (one cell = one configuration, its repetitions together): the
lookups the report and the targets share. Pure functions over the raw records."""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bench.stats import Spread, spread

Record = dict[str, Any]


@dataclass(frozen=True)
class CellKey:
    section: str
    server: str
    api: str
    client: str
    variant: str
    concurrency: int
    pin_client: bool = False
    idle_models: int = 0


def key_of(record: Record) -> CellKey:
    return CellKey(
        section=record.get("section", "matrix"),
        server=record["server"],
        api=record["api"],
        client=record.get("client", "python"),
        variant=record["variant"],
        concurrency=int(record["concurrency"]),
        pin_client=bool(record.get("pin_client", False)),
        idle_models=int(record.get("idle_models", 0)),
    )


@dataclass
class Cell:
    key: CellKey
    records: list[Record]

    @property
    def first(self) -> Record:
        return self.records[0]

    def throughput(self) -> Spread:
        return spread(r.get("throughput_rps") for r in self.records)

    def latency(self, name: str = "p50") -> Spread:
        return spread((r.get("latency_ms") or {}).get(name) for r in self.records)

    def relay(self, name: str = "p50") -> Spread:
        return spread((r.get("relay_ms") or {}).get(name) for r in self.records)

    def errors(self) -> int:
        return sum(sum((r.get("errors") or {}).values()) for r in self.records)

    def cpu_ms(self, role_prefix: str) -> Spread:
        def total(record: Record) -> float | None:
            cpu = record.get("cpu_ms_per_req") or {}
            values = [
                v for role, v in cpu.items() if role == role_prefix or role.startswith(role_prefix + ":")
            ]
            return sum(values) if values else None

        return spread(total(r) for r in self.records)

    def redis_commands(self) -> Spread:
        """Commands Redis ran per answered request (scripts' own commands included)."""
        return spread(
            sum(commands.values()) if (commands := r.get("redis_commands_per_req")) else None
            for r in self.records
        )


class Cells:
    """Every load cell of a run, by key."""

    def __init__(self, records: Iterable[Record]) -> None:
        grouped: dict[CellKey, list[Record]] = defaultdict(list)
        for record in records:
            if record.get("kind") == "load":
                grouped[key_of(record)].append(record)
        self.cells = {key: Cell(key, items) for key, items in grouped.items()}

    def get(self, **fields: Any) -> Cell | None:
        """The cell matching ``fields`` (section defaults to matrix, client to python)."""
        fields.setdefault("section", "matrix")
        fields.setdefault("client", "python")
        fields.setdefault("pin_client", False)
        fields.setdefault("idle_models", 0)
        return self.cells.get(CellKey(**fields))

    def select(self, **fields: Any) -> list[Cell]:
        """Cells whose key matches ``fields``; ``model`` matches the records' model kind."""
        model = fields.pop("model", None)
        out = []
        for key, cell in self.cells.items():
            if model is not None and cell.first.get("model") != model:
                continue
            if all(getattr(key, name) == value for name, value in fields.items()):
                out.append(cell)
        return sorted(out, key=lambda cell: (cell.key.variant, cell.key.concurrency))

    def best_throughput(self, **fields: Any) -> tuple[float, Cell | None]:
        """The highest median throughput among the matching cells (error-free ones only)."""
        best, where = math.nan, None
        for cell in self.select(**fields):
            value = cell.throughput().median
            if cell.errors() == 0 and math.isfinite(value) and (where is None or value > best):
                best, where = value, cell
        return best, where


def inprocess_limit(records: Iterable[Record], model: str, batch: int, group: str | None = None) -> Spread:
    """The in-process limit measured at the start of the run, or (``group``) in the windows paired
    with that group's cells."""
    return spread(
        r.get("inferences_per_s")
        for r in records
        if r.get("kind") == "inprocess"
        and r.get("model") == model
        and r.get("batch") == batch
        and r.get("group") == group
    )


def of_kind(records: Iterable[Record], kind: str, **fields: Any) -> list[Record]:
    return [r for r in records if r.get("kind") == kind and all(r.get(k) == v for k, v in fields.items())]
