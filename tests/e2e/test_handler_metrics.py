"""A handler's ``context.metrics`` on the metrics port, compared with TorchServe 0.12 serving the same
archive (made by the real torch-model-archiver) with the same metrics file and
``model_metrics_auto_detect=true``: what TorchServe showed is in ``torchserve_observed/``
(``scripts/observe_torchserve_metrics.py`` records it again). Counters, gauges of every ``add_*``
helper, a declared histogram, an auto-detected metric, and a declared one recorded with the wrong
dimensions (TorchServe drops its samples and keeps its empty family) must read the same, byte for byte
but the host name."""

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import metrics_archive
from tests.support.cli_stack import Stack
from tests.support.eventually import eventually

OBSERVED = Path(__file__).parent / "torchserve_observed" / "handler_metrics.prom"
COMPARED = (*metrics_archive.DETERMINISTIC, metrics_archive.MISMATCHED)
SHAPED = (
    "PredictionTime",
    "ts_inference_requests_total",
    "ts_inference_latency_microseconds",
    "ts_queue_latency_microseconds",
    "Requests2XX",
    "Requests4XX",
    "Requests5XX",
    "QueueTime",
    "WorkerLoadTime",
    "CPUUtilization",
    "MemoryUsed",
    "MemoryAvailable",
    "MemoryUtilization",
    "DiskUsage",
    "DiskUtilization",
    "DiskAvailable",
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("handler-metrics")
    config = metrics_archive.metrics_config(root)
    built = Stack.create(root, f"metrics_config={config}\nmodel_metrics_auto_detect=true\n")
    metrics_archive.archive(built.store)
    built.start([f"{metrics_archive.MODEL}={metrics_archive.MODEL}.mar"])
    try:
        yield built
    finally:
        built.stop()


def scrape(stack: Stack) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics", timeout=10) as response:
        text: str = response.read().decode()
    return text


def predict(stack: Stack, body: str) -> bytes:
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.http_port}/predictions/{metrics_archive.MODEL}",
        data=body.encode(),
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: bytes = response.read()
    return answer


async def test_handler_metrics_read_as_torchserve_shows_them(stack: Stack) -> None:
    # Declared metrics are exported before any call, as TorchServe registers them at startup.
    await eventually(lambda: "# TYPE MeteredLatency histogram" in scrape(stack), timeout_s=20)
    for body in metrics_archive.BODIES:
        assert predict(stack, body) == b"ok"
    total = f" {float(len(metrics_archive.BODIES))}"
    await eventually(
        lambda: any(
            line.startswith("MeteredRequests{") and line.endswith(total)
            for line in scrape(stack).splitlines()
        ),
        timeout_s=20,
    )
    text = scrape(stack)
    assert metrics_archive.families(text, COMPARED) == metrics_archive.families(
        OBSERVED.read_text(), COMPARED
    )
    # TorchServe's own PredictionTime, frontend and system metrics: the same HELP, TYPE and labels
    # (their values are durations, counts of polls and this machine's load).
    assert shapes(text) == shapes(OBSERVED.read_text())


def shapes(text: str) -> dict[str, list[str]]:
    """The named families with each sample's value cut off."""
    return {
        name: [line if line.startswith("#") else line.rsplit(" ", 1)[0] for line in lines]
        for name, lines in metrics_archive.families(text, SHAPED).items()
    }
