"""A handler that records a metric of every kind TorchServe 0.12's ``context.metrics`` offers, its
metrics file, and the requests that drive it: the same archive is served by TorchServe 0.12
(``scripts/observe_torchserve_metrics.py`` records what its metrics port shows) and by Sluice
(``tests/e2e/test_handler_metrics.py`` compares)."""

import subprocess
import sys
import textwrap
from pathlib import Path

ARCHIVER = Path(sys.executable).parent / "torch-model-archiver"
MODEL = "metered"

HANDLER = textwrap.dedent("""
    from ts.metrics.dimension import Dimension
    from ts.metrics.metric_type_enum import MetricTypes


    def handle(data, context):
        if data is None:
            return None
        metrics = context.metrics
        out = []
        for idx, row in enumerate(data):
            raw = row.get("data") or row.get("body")
            value = float(raw.decode() if isinstance(raw, (bytes, bytearray)) else raw)
            metrics.add_counter("MeteredRequests", 1, idx)
            metrics.add_size("MeteredSize", value, idx)
            metrics.add_percent("MeteredPercent", value / 10, idx)
            metrics.add_time("MeteredSeconds", value / 1000, idx, unit="s")
            metrics.get_metric("MeteredLatency", MetricTypes.HISTOGRAM).add_or_update(
                value / 100, [context.model_name, "Model"]
            )
            metrics.add_metric("MeteredItems", 2, "items", idx, [Dimension("Route", "a")])
            metrics.add_counter("MeteredBadDims", 1, idx, [Dimension("Extra", "x")])
            out.append("ok")
        return out
""").lstrip()

# TorchServe's own frontend metrics (ts_metrics) as its default file declares them, and the handler's.
METRICS_CONFIG = textwrap.dedent("""
    dimensions:
      - &model_name "ModelName"
      - &worker_name "WorkerName"
      - &level "Level"
      - &device_id "DeviceId"
      - &hostname "Hostname"

    ts_metrics:
      counter:
        - name: Requests2XX
          unit: Count
          dimensions: [*level, *hostname]
        - name: Requests4XX
          unit: Count
          dimensions: [*level, *hostname]
        - name: Requests5XX
          unit: Count
          dimensions: [*level, *hostname]
        - name: ts_inference_requests_total
          unit: Count
          dimensions: ["model_name", "model_version", "hostname"]
        - name: ts_inference_latency_microseconds
          unit: Microseconds
          dimensions: ["model_name", "model_version", "hostname"]
        - name: ts_queue_latency_microseconds
          unit: Microseconds
          dimensions: ["model_name", "model_version", "hostname"]
      gauge:
        - name: QueueTime
          unit: Milliseconds
          dimensions: [*level, *hostname]
        - name: WorkerThreadTime
          unit: Milliseconds
          dimensions: [*level, *hostname]
        - name: WorkerLoadTime
          unit: Milliseconds
          dimensions: [*worker_name, *level, *hostname]
        - name: CPUUtilization
          unit: Percent
          dimensions: [*level, *hostname]
        - name: MemoryUsed
          unit: Megabytes
          dimensions: [*level, *hostname]
        - name: MemoryAvailable
          unit: Megabytes
          dimensions: [*level, *hostname]
        - name: MemoryUtilization
          unit: Percent
          dimensions: [*level, *hostname]
        - name: DiskUsage
          unit: Gigabytes
          dimensions: [*level, *hostname]
        - name: DiskUtilization
          unit: Percent
          dimensions: [*level, *hostname]
        - name: DiskAvailable
          unit: Gigabytes
          dimensions: [*level, *hostname]

    model_metrics:
      counter:
        - name: MeteredRequests
          unit: Count
          dimensions: [*model_name, *level]
        - name: MeteredBadDims
          unit: Count
          dimensions: [*model_name, *level]
      gauge:
        - name: PredictionTime
          unit: ms
          dimensions: [*model_name, *level]
        - name: MeteredSize
          unit: MB
          dimensions: [*model_name, *level]
        - name: MeteredPercent
          unit: Percent
          dimensions: [*model_name, *level]
        - name: MeteredSeconds
          unit: s
          dimensions: [*model_name, *level]
      histogram:
        - name: MeteredLatency
          unit: ms
          dimensions: [*model_name, *level]
""").lstrip()

# Request bodies, one call each, in this order (the last gauge values are the last body's).
BODIES = ("3", "40", "7", "250", "12")
# Recorded by the handler but not declared: exported only with model_metrics_auto_detect=true.
AUTO_DETECTED = "MeteredItems"
# Declared, but recorded with one dimension too many: dropped by the frontend.
MISMATCHED = "MeteredBadDims"
# Families whose values are the same wherever the archive runs (PredictionTime is a duration).
DETERMINISTIC = (
    "MeteredRequests",
    "MeteredSize",
    "MeteredPercent",
    "MeteredSeconds",
    "MeteredLatency",
    AUTO_DETECTED,
)


def archive(store: Path) -> Path:
    """``<store>/metered.mar`` made by the real torch-model-archiver, and its metrics file beside
    the store."""
    source = store.parent / "metered-source"
    source.mkdir(exist_ok=True)
    (source / "metered_handler.py").write_text(HANDLER)
    subprocess.run(
        [
            str(ARCHIVER), "--model-name", MODEL, "--version", "1.0",
            "--handler", str(source / "metered_handler.py"), "--export-path", str(store), "--force",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return store / f"{MODEL}.mar"


def metrics_config(folder: Path) -> Path:
    path = folder / "metered-metrics.yaml"
    path.write_text(METRICS_CONFIG)
    return path


def families(text: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """The HELP, TYPE and sample lines of each named family in a Prometheus text body, the
    samples sorted and the ``Hostname`` label's value replaced by ``<host>``."""
    lines = text.splitlines()
    out: dict[str, list[str]] = {}
    for name in names:
        heads = (f"# HELP {name} ", f"# TYPE {name} ")
        header = [line for line in lines if line.startswith(heads)]
        sample_names = (name, f"{name}_bucket", f"{name}_count", f"{name}_sum")
        samples = sorted(
            _anonymous(line)
            for line in lines
            if not line.startswith("#") and line.split("{")[0].split(" ")[0] in sample_names
        )
        if header or samples:
            out[name] = header + samples
    return out


def _anonymous(line: str) -> str:
    start = line.find('Hostname="')
    if start < 0:
        return line
    end = line.find('"', start + len('Hostname="'))
    return f'{line[:start]}Hostname="<host>"{line[end + 1 :]}'
