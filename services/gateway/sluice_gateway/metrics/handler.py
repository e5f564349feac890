"""The metrics TorchServe handlers record through ``context.metrics``, as TorchServe's frontend
exports them in ``metrics_mode=prometheus``: the metric's own name, ``Torchserve prometheus <kind>
metric with unit: <unit>`` as HELP, its dimension names plus ``Hostname`` as labels.

Workers keep them per model version in Redis (:mod:`sluice.handler_metrics`); a scrape merges the
versions, as TorchServe keeps one registry for all its models: counters and histograms add up, and of
two gauges with the same labels the newer value wins. A name first seen with one kind keeps it; a
series of the same name with another kind is left out (TorchServe refuses to register it twice).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sluice import handler_metrics as hm

from sluice_gateway.metrics.cluster import VersionStats
from sluice_gateway.metrics.exposition import MetricFamily, Sample
from sluice_gateway.metrics.streams import Histogram

_T = TypeVar("_T")


@dataclass
class _Merged:
    # name -> (kind, unit) of its first series.
    kinds: dict[str, tuple[str, str]] = field(default_factory=dict)
    counters: dict[hm.Series, float] = field(default_factory=dict)
    gauges: dict[hm.Series, tuple[int, float]] = field(default_factory=dict)
    histograms: dict[hm.Series, Histogram] = field(default_factory=dict)

    def add(self, series: hm.Series, part: str, raw: str) -> None:
        kind_unit = self.kinds.setdefault(series.name, (series.kind, series.unit))
        if kind_unit[0] != series.kind or part == hm.DECLARED_PART:
            return
        try:
            if series.kind == hm.COUNTER:
                self.counters[series] = self.counters.get(series, 0.0) + float(raw)
            elif series.kind == hm.GAUGE:
                self._gauge(series, raw)
            else:
                self._histogram(series, part, float(raw))
        except ValueError:
            return

    def _gauge(self, series: hm.Series, raw: str) -> None:
        stamped = hm.parse_gauge(raw)
        if stamped is not None and stamped >= self.gauges.get(series, (-1, 0.0)):
            self.gauges[series] = stamped

    def _histogram(self, series: hm.Series, part: str, amount: float) -> None:
        histogram = self.histograms.setdefault(series, Histogram(hm.BUCKETS))
        bucket = hm.bucket_of(part)
        if part == hm.SUM_PART:
            histogram.total += amount
        elif bucket is not None:
            histogram.counts[bucket] += int(amount)


def families(stats: Sequence[VersionStats]) -> list[MetricFamily]:
    merged = _Merged()
    for version in stats:
        for raw_field, raw in version.handler_metrics.items():
            parsed = hm.parse_field(raw_field)
            if parsed is not None:
                merged.add(*parsed, raw)
    samples: dict[str, list[Sample]] = {name: [] for name in merged.kinds}
    for series, total in _ordered(merged.counters):
        samples[series.name].append(Sample(series.name, series.labels, total))
    for series, (_stamp, value) in _ordered(merged.gauges):
        samples[series.name].append(Sample(series.name, series.labels, value))
    for series, histogram in _ordered(merged.histograms):
        samples[series.name].extend(histogram.samples(series.name, series.labels))
    return [
        MetricFamily(name, kind, f"Torchserve prometheus {kind} metric with unit: {unit}", samples[name])
        for name, (kind, unit) in sorted(merged.kinds.items())
    ]


def _ordered(values: dict[hm.Series, _T]) -> Iterable[tuple[hm.Series, _T]]:
    return sorted(values.items(), key=lambda item: (item[0].name, item[0].labels))
