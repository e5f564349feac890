"""`make bench-quick`'s logic on a tiny matrix, against a real `sluice start` on free ports, so that the
benchmark cannot silently rot: archives built by torch-model-archiver, the in-process limit, the load
generators, the collectors, the report and the plots."""

import math
from pathlib import Path

import pytest

from bench import presets, report
from bench.cells import Cells, of_kind
from bench.runner import Runner


@pytest.mark.timeout(240)
def test_bench_smoke_runs_a_tiny_matrix_against_sluice(tmp_path: Path) -> None:
    plan = presets.plan("smoke")
    out = tmp_path / "results"
    records = Runner(plan, out, tmp_path / "work").run()
    cells = Cells(records)

    assert of_kind(records, "inprocess", model="mlp")[0]["inferences_per_s"] > 0
    for variant in ("mlp_b1_w1", "mlp_b8_w1_eager"):
        for concurrency in (1, 4):
            cell = cells.get(server="sluice", api="predictions", variant=variant, concurrency=concurrency)
            assert cell is not None, (variant, concurrency)
            assert cell.errors() == 0
            assert cell.throughput().median > 0
            assert math.isfinite(cell.latency("p99").median)
            assert cell.first["cpu_ms_per_req"]["gateway"] > 0
            assert cell.redis_commands().median >= 4  # enqueue, the worker's read, reply and ack at least
    for variant in ("mlp_b1_w1", "mlp_b8_w1_eager"):
        paired = cells.get(
            section="paired", server="sluice", api="predictions", variant=variant, concurrency=1
        )
        assert paired is not None, variant
        assert paired.errors() == 0, variant
    stream = cells.get(server="sluice", api="stream", variant="stream", concurrency=1)
    assert stream is not None
    assert stream.errors() == 0
    assert stream.relay().median > 0
    # KServe and REST cells ran (their success is those APIs' own tests' business).
    assert cells.get(section="protocols", server="sluice", api="kserve", variant="mlp_b1_w1", concurrency=1)
    assert cells.get(section="protocols", server="sluice", api="rest", variant="mlp_b1_w1", concurrency=1)
    soak = of_kind(records, "redis_memory")[0]
    assert soak["after"]["stream_entries"] <= soak["before"]["stream_entries"] + 10
    held = of_kind(records, "held_streams")[0]
    assert held["gateway_rss_mib"] > 0
    rss = of_kind(records, "rss", phase="idle")[0]["rss_mib"]
    assert {"gateway", "manager", "redis"} <= set(rss)
    assert any(role.startswith("worker:mlp_b1_w1:") for role in rss)

    text = report.write(out).read_text()
    assert "## Targets" in text
    assert "## mlp 64" in text
    assert "## Batching at low load: paired C=1 rounds" in text
    assert (out / "plots" / "throughput_vs_concurrency_mlp.png").stat().st_size > 1000
    assert not [r for r in of_kind(records, "error") if r.get("step") != "load cell"]
