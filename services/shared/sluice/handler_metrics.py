"""The metrics TorchServe handlers record through ``context.metrics``, as workers write them to Redis
and gateways read them back for ``GET /metrics``.

One hash per model version (:func:`sluice.redis.keys.handler_metrics`); each field names a series and
a part of it, as compact JSON ``[name, kind, unit, [[label, value], ...], part]``:

- a counter's one part ``""`` holds its total (workers ``HINCRBYFLOAT`` it);
- a gauge's one part ``""`` holds ``"<unix ms> <value>"`` (workers ``HSET`` it; the newest wins when
  several versions report the same labels, as the last ``set`` wins in TorchServe);
- a histogram's parts ``"b0"`` ... ``"b14"`` count the observations that fell into each bucket of
  :data:`BUCKETS` (the last one above every bound), and ``"sum"`` their sum;
- a metric declared in ``metrics_config`` has a field with no labels and part ``"declared"``, so
  that it is exported (with no samples) before anything records it, as TorchServe's are.

Kinds, units and label names are TorchServe's (its frontend's ``model_metrics`` registration: the
names from ``metrics_config`` plus ``Hostname``), decided by the worker that saw the metric.
"""

import functools
import json
from bisect import bisect_left
from dataclasses import dataclass

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
KINDS = (COUNTER, GAUGE, HISTOGRAM)
# Prometheus' Java simpleclient's default buckets, which TorchServe's histograms use.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
SUM_PART = "sum"
DECLARED_PART = "declared"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    kind: str
    unit: str
    labels: Labels

    def field(self, part: str = "") -> str:
        return _encoded(self, part)


# A worker records the same few series batch after batch: their fields are encoded once.
@functools.lru_cache(maxsize=4096)
def _encoded(series: Series, part: str) -> str:
    labels = [list(pair) for pair in series.labels]
    return json.dumps([series.name, series.kind, series.unit, labels, part], separators=(",", ":"))


def bucket_part(index: int) -> str:
    return f"b{index}"


def bucket_of(part: str) -> int | None:
    """The bucket a histogram part counts (:func:`bucket_part`), or None for another part."""
    index = part[1:]
    if part.startswith("b") and index.isdigit() and int(index) <= len(BUCKETS):
        return int(index)
    return None


def bucket_index(value: float) -> int:
    """The bucket an observation falls into: the first bound at or above it, else the overflow."""
    return bisect_left(BUCKETS, value)


def parse_field(field: str) -> tuple[Series, str] | None:
    """The series and part a field names, or None for a field that is not one (skipped by readers)."""
    try:
        name, kind, unit, labels, part = json.loads(field)
        series = Series(str(name), str(kind), str(unit), tuple((str(k), str(v)) for k, v in labels))
    except (ValueError, TypeError):
        return None
    if series.kind not in KINDS or not isinstance(part, str):
        return None
    return series, part


def gauge_value(unix_ms: int, value: float) -> str:
    return f"{unix_ms} {value!r}"


def parse_gauge(raw: str) -> tuple[int, float] | None:
    stamp, _, value = raw.partition(" ")
    try:
        return int(stamp), float(value)
    except ValueError:
        return None
