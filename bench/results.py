"""The raw results: one JSON object per line in ``results.jsonl``. Every record has ``kind``; load
records also name their cell (server, api, client, model, batching, workers, concurrency, section, rep)."""

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

RESULTS_FILE = "results.jsonl"


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf: write them as null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item) for item in value]
    return value


class ResultsWriter:
    """Appends records to ``<dir>/results.jsonl``, flushing each so a killed run keeps what it did."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / RESULTS_FILE
        self._file: TextIO = self.path.open("a", encoding="utf-8")
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        cleaned: dict[str, Any] = _clean(record)
        self._file.write(json.dumps(cleaned, sort_keys=True) + "\n")
        self._file.flush()
        self.records.append(cleaned)
        return cleaned

    def close(self) -> None:
        self._file.close()


def read(path: Path) -> list[dict[str, Any]]:
    return list(iter_records(path.read_text(encoding="utf-8").splitlines()))


def iter_records(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        line = line.strip()
        if line:
            yield json.loads(line)
