"""TorchServe's frontend rules for handler metric lines, applied in the worker: lines recorded through
TorchServe's real ``MetricsCacheYamlImpl`` (captured from its logging), declared and auto-detected
registrations, and the lines the frontend drops."""

import logging
from pathlib import Path

import pytest
from sluice import handler_metrics as hm
from sluice_worker.metric_capture import capturing
from sluice_worker.model_metrics import (
    ModelMetrics,
    PendingMetrics,
    Registration,
    declared_metrics,
    parse_line,
)
from ts.metrics.dimension import Dimension
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.metrics.metric_type_enum import MetricTypes

CONFIG = """
dimensions:
  - &model_name "ModelName"
  - &level "Level"
model_metrics:
  counter:
    - name: Calls
      unit: Count
      dimensions: [*model_name, *level]
  gauge:
    - name: Size
      unit: MB
      dimensions: [*model_name, *level]
  histogram:
    - name: Latency
      unit: ms
      dimensions: [*model_name, *level]
"""
LABELS = (("ModelName", "m"), ("Level", "Model"), ("Hostname", "h"))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.yaml"
    path.write_text(CONFIG)
    return path


def ts_metrics(config: Path) -> MetricsCacheYamlImpl:
    cache = MetricsCacheYamlImpl(config_file_path=str(config))
    cache.initialize_cache()
    cache.model_name = "m"
    cache.set_request_ids({0: "req-0"})
    return cache


def line(text: str) -> str:
    return f"{text}|#hostname:h,1732000000,req-0"


def test_a_line_parses_as_torchserves_frontend_reads_it() -> None:
    parsed = parse_line(
        "Handler Time.ms:3.25|#ModelName:m,Level:Model,odd|#type:GAUGE|#hostname:h,1732000000,r1"
    )
    assert parsed is not None
    assert (parsed.name, parsed.unit, parsed.value, parsed.kind, parsed.hostname) == (
        "Handler Time",
        "ms",
        "3.25",
        "GAUGE",
        "h",
    )
    # A dimension without a ':' is skipped.
    assert parsed.dimensions == (("ModelName", "m"), ("Level", "Model"))


@pytest.mark.parametrize(
    "text", ["Calls:1|#A:b|#hostname:h,1", "Calls.Count:x|#A:b|#hostname:h,1", "free text"]
)
def test_what_is_not_a_metric_line_is_none(text: str) -> None:
    assert parse_line(text) is None


def test_declared_metrics_take_the_files_kind_unit_and_dimensions_plus_hostname(config: Path) -> None:
    assert declared_metrics(config) == {
        "Calls": Registration(hm.COUNTER, "Count", ("ModelName", "Level", "Hostname")),
        "Size": Registration(hm.GAUGE, "MB", ("ModelName", "Level", "Hostname")),
        "Latency": Registration(hm.HISTOGRAM, "ms", ("ModelName", "Level", "Hostname")),
    }


def test_an_unreadable_metrics_file_declares_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("model_metrics: [not, a, mapping")
    assert declared_metrics(tmp_path / "bad.yaml") == {}
    assert declared_metrics(tmp_path / "missing.yaml") == {}


def declarations(config: Path) -> set[str]:
    return {
        hm.Series(n, r.kind, r.unit, ()).field(hm.DECLARED_PART) for n, r in declared_metrics(config).items()
    }


def test_recorded_through_ts_counters_add_gauges_keep_the_last_histograms_count_buckets(config: Path) -> None:
    metrics = ModelMetrics(declared_metrics(config), auto_detect=False, clock_ms=lambda: 7)
    cache = ts_metrics(config)
    with capturing(metrics):
        for value in (2.0, 0.03, 20.0):
            cache.add_counter("Calls", 1, 0)
            cache.add_size("Size", value, 0)
            cache.get_metric("Latency", MetricTypes.HISTOGRAM).add_or_update(value, ["m", "Model"])
    pending = metrics.take()
    calls = next(field for field in pending.increments if field.startswith('["Calls"'))
    hostname = hm.parse_field(calls)[0].labels[-1][1]  # type: ignore[index]
    labels = (("ModelName", "m"), ("Level", "Model"), ("Hostname", hostname))
    latency = hm.Series("Latency", hm.HISTOGRAM, "ms", labels)
    assert pending.increments == {
        hm.Series("Calls", hm.COUNTER, "Count", labels).field(): 3.0,
        latency.field("b3"): 1.0,  # 0.03 <= 0.05
        latency.field("b10"): 1.0,  # 2.0 <= 2.5
        latency.field("b14"): 1.0,  # 20.0 above every bound
        latency.field(hm.SUM_PART): pytest.approx(22.03),
    }
    assert pending.values == {
        **dict.fromkeys(declarations(config), "1"),
        hm.Series("Size", hm.GAUGE, "MB", labels).field(): hm.gauge_value(7, 20.0),
    }
    assert not metrics.take()


def test_an_undeclared_metric_is_dropped_unless_auto_detected(config: Path) -> None:
    record = parse_line(line("Items.items:2|#Route:a,ModelName:m,Level:Model|#type:COUNTER"))
    assert record is not None
    dropped = ModelMetrics({}, auto_detect=False)
    dropped.record(record)
    assert not dropped.take()
    detected = ModelMetrics({}, auto_detect=True)
    detected.record(record)
    detected.record(record)
    labels = (("Route", "a"), *LABELS)
    assert detected.take().increments == {hm.Series("Items", hm.COUNTER, "items", labels).field(): 4.0}


@pytest.mark.parametrize(
    "text",
    [
        "Calls.Count:1|#Extra:x,ModelName:m,Level:Model|#type:COUNTER",  # one dimension too many
        "Calls.Count:-1|#ModelName:m,Level:Model|#type:COUNTER",  # a counter cannot decrease
        "Calls.Count:1,5|#ModelName:m,Level:Model|#type:COUNTER",  # not a number
    ],
)
def test_lines_the_frontend_drops_are_dropped(config: Path, text: str) -> None:
    metrics = ModelMetrics(declared_metrics(config), auto_detect=True)
    metrics.take()
    record = parse_line(line(text))
    assert record is not None
    metrics.record(record)
    assert not metrics.take()


def test_auto_detection_needs_the_lines_type() -> None:
    metrics = ModelMetrics({}, auto_detect=True)
    record = parse_line("Items.items:2|#Route:a|#hostname:h,1732000000")
    assert record is not None
    assert record.kind is None
    metrics.record(record)
    assert not metrics.take()


def test_values_whose_write_failed_come_back_under_newer_ones() -> None:
    metrics = ModelMetrics({}, auto_detect=True, clock_ms=lambda: 5)
    failed = PendingMetrics(increments={"c": 2.0}, values={"g": "1 1.0", "old": "1 3.0"})
    for text in ("C.Count:1|#A:b|#type:COUNTER", "G.ms:9|#A:b|#type:GAUGE"):
        record = parse_line(line(text))
        assert record is not None
        metrics.record(record)
    newer = metrics.take()
    metrics.put_back(newer)
    metrics.put_back(failed)
    merged = metrics.take()
    assert merged.increments["c"] == 2.0
    assert merged.values["old"] == "1 3.0"
    assert merged.values[hm.Series("G", hm.GAUGE, "ms", (("A", "b"), ("Hostname", "h"))).field()] == "5 9.0"


def test_captured_lines_leave_the_log_and_others_stay(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = logging.StreamHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        metrics = ModelMetrics(declared_metrics(config), auto_detect=False)
        with capturing(metrics):
            ts_metrics(config).add_counter("Calls", 1, 0)
            logging.getLogger("ts.metrics").error("[METRICS]Failed to update metric with name:X")
            ts_metrics(config).add_metric("Other", 1, "u", 0, [Dimension("A", "b")])
    finally:
        root.removeHandler(handler)
    printed = capsys.readouterr().err
    assert "[METRICS]Failed to update metric" in printed
    assert "[METRICS]Calls" not in printed
    assert "[METRICS]Other" not in printed
    assert any(field.startswith('["Calls"') for field in metrics.take().increments)
