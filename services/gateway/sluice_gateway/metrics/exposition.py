"""Prometheus text format 0.0.4, written the way TorchServe's Java client writes it: HELP, TYPE, then
one line per sample with a trailing comma inside the label braces (``{a="x",b="y",} 3.0``).
Prometheus parsers accept the comma; clients that match TorchServe's output byte for byte need it."""

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Sequence[tuple[str, str]]
    value: float


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    kind: str  # "counter", "gauge", "histogram"
    help: str
    samples: list[Sample] = field(default_factory=list)

    def sample_names(self) -> set[str]:
        return {self.name} | {sample.name for sample in self.samples}


def format_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample_line(sample: Sample) -> str:
    if not sample.labels:
        return f"{sample.name} {format_value(sample.value)}\n"
    labels = "".join(f'{key}="{_escape(value)}",' for key, value in sample.labels)
    return f"{sample.name}{{{labels}}} {format_value(sample.value)}\n"


def select(families: Iterable[MetricFamily], names: Collection[str]) -> list[MetricFamily]:
    """``?name[]=`` filtering: families named (or with a sample named) in ``names``; all when empty."""
    if not names:
        return list(families)
    wanted = set(names)
    return [family for family in families if family.sample_names() & wanted]


def render(families: Iterable[MetricFamily]) -> str:
    out: list[str] = []
    for family in families:
        out.append(f"# HELP {family.name} {family.help}\n")
        out.append(f"# TYPE {family.name} {family.kind}\n")
        out.extend(_sample_line(sample) for sample in family.samples)
    return "".join(out)


def histogram_samples(
    name: str, labels: Sequence[tuple[str, str]], counts: dict[int, int], bounds: Sequence[int]
) -> list[Sample]:
    """Cumulative ``_bucket`` samples (``le`` = each bound, then ``+Inf``), ``_count`` and ``_sum`` from
    exact per-value counts."""
    samples = []
    for bound in bounds:
        cumulative = sum(count for value, count in counts.items() if value <= bound)
        samples.append(Sample(f"{name}_bucket", [*labels, ("le", format_value(bound))], cumulative))
    total = sum(counts.values())
    samples.append(Sample(f"{name}_bucket", [*labels, ("le", "+Inf")], total))
    samples.append(Sample(f"{name}_count", labels, total))
    samples.append(Sample(f"{name}_sum", labels, sum(value * count for value, count in counts.items())))
    return samples


def bucket_samples(
    name: str,
    labels: Sequence[tuple[str, str]],
    bounds: Sequence[float],
    counts: Sequence[int],
    total: float,
) -> list[Sample]:
    """Cumulative ``_bucket`` samples, ``_count`` and ``_sum`` from per-bucket counts: ``counts[i]``
    values fell at or below ``bounds[i]`` (and above the bound before), ``counts[-1]`` above the
    last bound; ``total`` is their sum."""
    samples, cumulative = [], 0
    for bound, count in zip(bounds, counts, strict=False):
        cumulative += count
        samples.append(Sample(f"{name}_bucket", [*labels, ("le", format_value(bound))], cumulative))
    every = sum(counts)
    samples.append(Sample(f"{name}_bucket", [*labels, ("le", "+Inf")], every))
    samples.append(Sample(f"{name}_count", labels, every))
    samples.append(Sample(f"{name}_sum", labels, total))
    return samples
