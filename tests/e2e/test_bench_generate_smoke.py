"""`make bench-generate`'s logic in a tiny configuration, against a real `sluice start` on free ports
(TorchServe left out), so that the benchmark cannot silently rot: the tiny_gpt archives (continuous
batching and the plain streaming handler), the torch threads check, the gRPC and REST token-stream
clients with every streamed text checked, the CPU and Redis commands per token, the in-process limit,
the report and its summary. Timings are the benchmark's business, not asserted."""

import json
import math
from pathlib import Path

import pytest

from bench import generate, generate_report


@pytest.mark.timeout(300)
def test_bench_generate_smoke_streams_tokens_from_every_system(tmp_path: Path) -> None:
    out = tmp_path / "results"
    sizes = generate.SMOKE
    records = generate.measure(sizes, out, work=tmp_path / "work")

    assert [r for r in records if r["kind"] == "generate_error"] == []
    servers = next(r for r in records if r["kind"] == "generate_servers")
    assert servers["sluice"]["torch_threads"] == {"tiny_gpt": 1, "tiny_gpt_plain": 1}
    found = generate_report.cells(records)
    assert sorted(found) == sorted((s, c) for s in sizes.systems for c in sizes.concurrency)
    for (system, _), cell in found.items():
        [record] = cell.records
        assert record["errors_total"] == 0, record
        assert record["tokens_per_s"] > 0
        assert math.isfinite(record["ttft_ms"]["p99"])
        assert math.isfinite(record["itl_ms"]["p50"])
        assert record["cpu_us_per_token"]["worker"] > 0
        if system != "inprocess":
            # Every token of every stream arrived, one chunk each.
            assert record["tokens_total"] == record["chunks_total"]
            assert record["requests_completed_in_window"] > 0
            assert record["cpu_us_per_token"]["gateway"] > 0
            assert sum(record["redis_commands_per_token"].values()) > 0
    assert [r["configured_batch_size"] for r in records if r["kind"] == "generate_sweep"] == [4]

    text = generate_report.write(out).read_text()
    assert "## Tokens/s and latency" in text
    assert "| Sluice CB, gRPC | 4 |" in text
    assert "## Goals" in text
    summary = json.loads((out / generate_report.SUMMARY_FILE).read_text())
    assert summary["cells"]["sluice_rest"]["4"]["tokens_per_s"] > 0
