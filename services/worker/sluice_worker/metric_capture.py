"""Where the ``[METRICS]`` lines of TorchServe's ``ts`` package (and of handlers that log their own)
go instead of the worker's log: to :class:`~sluice_worker.model_metrics.ModelMetrics`.

TorchServe's frontend takes every line its workers print that starts with ``[METRICS]``; its workers
log them at INFO. Here a handler on the root logger takes the lines that parse as metrics, the root's
other handlers stop printing them (one such line per request would flood the log), and the ``ts.metrics``
loggers log at INFO whatever the worker's log level. Lines that start with ``[METRICS]`` but do not
parse (``ts`` reports a failed update that way) stay in the log.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sluice_worker.model_metrics import LINE_PREFIX, MetricLine, ModelMetrics, parse_line

TS_METRICS_LOGGER = "ts.metrics"


_PARSED = "sluice_metric_line"


def _metric_line(record: logging.LogRecord) -> MetricLine | None:
    """The record's metric line, parsed once per record (the capture and the filters both ask)."""
    if hasattr(record, _PARSED):
        parsed: MetricLine | None = getattr(record, _PARSED)
        return parsed
    message = record.msg if isinstance(record.msg, str) and not record.args else record.getMessage()
    parsed = parse_line(message[len(LINE_PREFIX) :]) if message.startswith(LINE_PREFIX) else None
    setattr(record, _PARSED, parsed)
    return parsed


class _Capture(logging.Handler):
    def __init__(self, metrics: ModelMetrics) -> None:
        super().__init__()
        self._metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        line = _metric_line(record)
        if line is not None:
            self._metrics.record(line)


class _HideMetricLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _metric_line(record) is None


@contextmanager
def capturing(metrics: ModelMetrics) -> Iterator[None]:
    """Metric lines go to ``metrics`` while inside."""
    root = logging.getLogger()
    ts_metrics = logging.getLogger(TS_METRICS_LOGGER)
    capture, hide = _Capture(metrics), _HideMetricLines()
    others = list(root.handlers)
    level = ts_metrics.level
    for handler in others:
        handler.addFilter(hide)
    root.addHandler(capture)
    ts_metrics.setLevel(logging.INFO)
    try:
        yield
    finally:
        ts_metrics.setLevel(level)
        root.removeHandler(capture)
        for handler in others:
            handler.removeFilter(hide)
