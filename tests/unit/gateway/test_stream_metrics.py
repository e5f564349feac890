"""Stream metrics (time to first token, inter-token latency, tokens) and the generative workers'
gauges, without sockets: the histogram, the families the data plane's observer feeds, the cluster
families built from version stats."""

from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice_gateway.inflight import StreamJob
from sluice_gateway.metrics.cluster import VersionStats, families
from sluice_gateway.metrics.exposition import render
from sluice_gateway.metrics.inference import InferenceMetrics
from sluice_gateway.metrics.streams import Histogram
from sluice_gateway.waiters import StreamWaiter


def test_histogram_counts_each_value_in_its_bucket_cumulatively() -> None:
    histogram = Histogram((10, 100))
    for value in (5, 10, 11, 100, 1000):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 1]
    samples = {(s.name, dict(s.labels).get("le")): s.value for s in histogram.samples("h", [("m", "x")])}
    assert samples == {
        ("h_bucket", "10.0"): 2,
        ("h_bucket", "100.0"): 4,
        ("h_bucket", "+Inf"): 5,
        ("h_count", None): 5,
        ("h_sum", None): 1126.0,
    }


async def test_streamed_chunks_feed_the_three_families_per_model_and_named_version() -> None:
    metrics = InferenceMetrics(hostname="h")

    def job(version: str) -> StreamJob:
        waiter = StreamWaiter(0, 10)
        return StreamJob(
            lambda _job, _cancel: None, waiter, model="llm", version="1", job_id="j", deadline_ms=0,
            requested_version=version,
        )  # fmt: skip

    default, named = job(""), job("1")
    metrics.streamed(default, 2_000_000, True)  # 2 ms to the first token
    metrics.streamed(default, 30_000, False)
    metrics.streamed(default, 70_000, False)
    metrics.streamed(named, 1_000, True)
    text = render(metrics.families())
    labels = 'model_name="llm",model_version="default",hostname="h",'
    assert "# TYPE sluice_time_to_first_token_microseconds histogram\n" in text
    assert f'sluice_time_to_first_token_microseconds_bucket{{{labels}le="2500.0",}} 1.0\n' in text
    assert f'sluice_time_to_first_token_microseconds_bucket{{{labels}le="1000.0",}} 0.0\n' in text
    assert f"sluice_time_to_first_token_microseconds_sum{{{labels}}} 2000.0\n" in text
    assert "# TYPE sluice_inter_token_latency_microseconds histogram\n" in text
    assert f'sluice_inter_token_latency_microseconds_bucket{{{labels}le="50.0",}}' not in text
    assert f'sluice_inter_token_latency_microseconds_bucket{{{labels}le="500.0",}} 2.0\n' in text
    assert f"sluice_inter_token_latency_microseconds_count{{{labels}}} 2.0\n" in text
    assert f"sluice_inter_token_latency_microseconds_sum{{{labels}}} 100.0\n" in text
    assert "# TYPE sluice_stream_tokens_total counter\n" in text
    assert f"sluice_stream_tokens_total{{{labels}}} 3.0\n" in text
    assert 'sluice_stream_tokens_total{model_name="llm",model_version="1",hostname="h",} 1.0\n' in text


def test_no_streams_no_samples() -> None:
    text = render(InferenceMetrics(hostname="h").families())
    assert "# TYPE sluice_stream_tokens_total counter\n" in text
    assert "sluice_stream_tokens_total{" not in text


def worker(worker_id: str, running: int, slots: int) -> WorkerRecord:
    return WorkerRecord(
        worker_id=worker_id, pid=1, host="h", status=WorkerStatus.READY, started_unix_ms=1,
        running=running, slots=slots,
    )  # fmt: skip


def test_running_requests_and_slots_are_reported_for_generative_versions_only() -> None:
    llm = VersionStats(
        "llm", "1", 0, 2, {}, workers=(worker("9000", 3, 8), worker("9001", 0, 8)), generative=True
    )
    mlp = VersionStats("mlp", "1", 0, 1, {}, workers=(worker("9002", 0, 0),))
    text = render(families([llm, mlp]))
    one = 'model_name="llm",model_version="1",'
    assert "# TYPE sluice_worker_running_requests gauge\n" in text
    assert f'sluice_worker_running_requests{{{one}worker="9000",}} 3.0\n' in text
    assert f'sluice_worker_running_requests{{{one}worker="9001",}} 0.0\n' in text
    assert f'sluice_worker_slots{{{one}worker="9000",}} 8.0\n' in text
    assert "# TYPE sluice_worker_slots gauge\n" in text
    gauges = [
        line
        for line in text.splitlines()
        if line.startswith(("sluice_worker_running", "sluice_worker_slots"))
    ]
    assert len(gauges) == 4
    assert not any('model_name="mlp"' in line for line in gauges)
