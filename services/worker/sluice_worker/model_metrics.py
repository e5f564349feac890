"""What a handler records through ``context.metrics``, kept as TorchServe's frontend keeps it in
``metrics_mode=prometheus``, until the worker writes it to Redis (:mod:`sluice_worker.broker.metrics_writer`).

TorchServe's ``ts`` package logs each recorded value as a ``[METRICS]`` line
(``HandlerTime.ms:3.2|#ModelName:m,Level:Model|#type:GAUGE|#hostname:h,1732...,<request id>``) and its
frontend parses every such line its workers print. Here the same lines are parsed with the frontend's
pattern (:func:`parse_line`) and applied with its rules (:meth:`ModelMetrics.record`):

- a metric declared in ``metrics_config``'s ``model_metrics`` takes the kind, unit and dimension names
  declared there, plus ``Hostname``; the line's dimension values are taken in order, plus its host;
- an undeclared metric is dropped, unless ``model_metrics_auto_detect`` is on: then it is registered
  with the line's own kind, unit and dimension names (plus ``Hostname``) the first time it is seen;
- a line whose values do not match the registered label names, whose value is not a number, or that
  would lower a counter is dropped with an error in the log, as TorchServe's frontend drops it.

Counters add, gauges keep their last value, histograms count observations in
:data:`sluice.handler_metrics.BUCKETS`; declared metrics are exported with no samples until recorded,
as TorchServe registers them at startup. Lines arrive on the handler's thread and are taken on the
event loop's, so the pending values are behind a lock.
"""

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from sluice import handler_metrics as hm
from sluice.log import get_logger

log = get_logger(__name__)

LINE_PREFIX = "[METRICS]"
# TorchServe's frontend pattern for a metric line (org.pytorch.serve.metrics.Metric), matched whole.
_PATTERN = re.compile(
    r"\s*([\w\s]+)\.([\w\s]+):([0-9\-,.e]+)\|#([^|]*)(\|#type:([^|,]+))?\|#hostname:([^,]+),([^,]+)(,(.*))?",
    re.ASCII,
)
HOSTNAME_LABEL = "Hostname"


@dataclass(frozen=True, slots=True)
class MetricLine:
    name: str
    unit: str
    value: str
    dimensions: tuple[tuple[str, str], ...]
    # COUNTER, GAUGE or HISTOGRAM as the handler's metric says; None when the line has no type.
    kind: str | None
    hostname: str


def parse_line(text: str) -> MetricLine | None:
    """A metric line without its ``[METRICS]`` prefix, or None when it is not one."""
    match = _PATTERN.fullmatch(text)
    if match is None:
        return None
    pairs = (item.split(":") for item in match.group(4).split(","))
    dimensions = tuple((pair[0], pair[1]) for pair in pairs if len(pair) == 2)
    return MetricLine(
        name=match.group(1),
        unit=match.group(2),
        value=match.group(3),
        dimensions=dimensions,
        kind=match.group(6),
        hostname=match.group(7),
    )


@dataclass(frozen=True, slots=True)
class Registration:
    kind: str
    unit: str
    label_names: tuple[str, ...]


def declared_metrics(config: Path) -> dict[str, Registration]:
    """The ``model_metrics`` of a TorchServe metrics file: name -> kind, unit, dimension names and
    ``Hostname`` (an unreadable file declares nothing, logged, as TorchServe's frontend loads none)."""
    try:
        document = yaml.safe_load(config.read_text())
        section = document.get("model_metrics") or {}
        return {
            str(spec["name"]): Registration(
                kind, str(spec.get("unit", "")), (*map(str, spec.get("dimensions") or ()), HOSTNAME_LABEL)
            )
            for kind in hm.KINDS
            for spec in section.get(kind) or ()
        }
    except (OSError, yaml.YAMLError, AttributeError, KeyError, TypeError) as exc:
        log.error("metrics_config unreadable; no model metrics declared", path=str(config), error=str(exc))
        return {}


@dataclass
class PendingMetrics:
    """Values not yet written: ``HINCRBYFLOAT`` amounts (counters, histogram parts) and ``HSET``
    values (gauges, declarations), by field of :mod:`sluice.handler_metrics`."""

    increments: dict[str, float] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.increments or self.values)


class ModelMetrics:
    def __init__(
        self,
        declared: Mapping[str, Registration],
        auto_detect: bool,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._registered = dict(declared)
        self._auto_detect = auto_detect
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        # The declared metrics are exported from the start, with no samples until recorded.
        self._pending = PendingMetrics(
            values={
                hm.Series(name, spec.kind, spec.unit, ()).field(hm.DECLARED_PART): "1"
                for name, spec in declared.items()
            }
        )

    def record(self, line: MetricLine) -> None:
        registration = self._registration(line)
        if registration is None:
            return
        values = (*(value for _name, value in line.dimensions), line.hostname)
        if len(values) != len(registration.label_names):
            log.error(
                "metric dropped: its dimensions do not match its registration",
                metric=line.name,
                labels=list(registration.label_names),
                values=list(values),
            )
            return
        try:
            value = float(line.value)
        except ValueError:
            log.error("metric dropped: its value is not a number", metric=line.name, value=line.value)
            return
        labels = tuple(zip(registration.label_names, values, strict=True))
        series = hm.Series(line.name, registration.kind, registration.unit, labels)
        self._apply(series, value)

    def take(self) -> PendingMetrics:
        with self._lock:
            pending, self._pending = self._pending, PendingMetrics()
        return pending

    def put_back(self, pending: PendingMetrics) -> None:
        """Values whose write failed, merged under those recorded since (newer gauges win)."""
        with self._lock:
            for name, amount in pending.increments.items():
                self._pending.increments[name] = self._pending.increments.get(name, 0.0) + amount
            for name, value in pending.values.items():
                self._pending.values.setdefault(name, value)

    def _registration(self, line: MetricLine) -> Registration | None:
        registration = self._registered.get(line.name)
        if registration is not None or not self._auto_detect:
            return registration
        kind = (line.kind or "").lower()
        if kind not in hm.KINDS:
            log.error("metric dropped: auto-detection needs its type", metric=line.name, type=line.kind)
            return None
        names = (*(name for name, _value in line.dimensions), HOSTNAME_LABEL)
        registration = Registration(kind, line.unit, names)
        log.info("registering auto detected model metric", metric=line.name, kind=kind, labels=list(names))
        self._registered[line.name] = registration
        return registration

    def _apply(self, series: hm.Series, value: float) -> None:
        with self._lock:
            pending = self._pending
            if series.kind == hm.COUNTER:
                if value < 0:
                    log.error("metric dropped: a counter cannot decrease", metric=series.name, value=value)
                    return
                name = series.field()
                pending.increments[name] = pending.increments.get(name, 0.0) + value
            elif series.kind == hm.GAUGE:
                pending.values[series.field()] = hm.gauge_value(self._clock_ms(), value)
            else:
                for name, amount in (
                    (series.field(hm.bucket_part(hm.bucket_index(value))), 1.0),
                    (series.field(hm.SUM_PART), value),
                ):
                    pending.increments[name] = pending.increments.get(name, 0.0) + amount
