import json
from pathlib import Path
from typing import Any

from bench import head_to_head, presets, report
from bench.matrix import HeadToHead
from bench.targets import evaluate
from tests.unit.bench.test_report import load, records

PLAN = HeadToHead(rounds=2, duration_s=4.0, warmup_s=1.0, server_warmup_s=60.0)
TIMES = "\N{MULTIPLICATION SIGN}"


def h2load(server: str, variant: str, concurrency: int, rps: float) -> dict[str, Any]:
    return load(server, variant, concurrency, rps, 0.0, section="h2load", client="h2load")


def outcomes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {o.target: o for o in evaluate(runs)}


def test_the_full_and_quick_plans_end_head_to_head_and_only_with_both_mlp_groups() -> None:
    full = presets.plan("full")
    assert full.head_to_head is not None
    assert full.head_to_head.rounds == 4
    assert full.head_to_head.server_warmup_s >= 60.0
    assert presets.plan("quick").head_to_head is not None
    assert presets.plan("smoke").head_to_head is None
    assert full.without_torchserve().head_to_head is None
    assert presets.only(full, ["mlp"]).head_to_head is not None
    assert presets.only(full, ["cnn"]).head_to_head is None


def test_each_server_gets_c1_and_its_own_best_cell_per_client() -> None:
    runs = records()
    runs.append(load("sluice", "mlp_b8_w2_fill", 64, 3500.0, 20.0))
    runs.append(load("sluice", "mlp_b8_w2_fill", 16, 3600.0, 20.0, errors={"UNAVAILABLE": 3}))
    runs += [
        h2load("sluice", "mlp_b8_w1_eager", 64, 5000.0),
        h2load("torchserve", "mlp_b8_w1_fill", 64, 4000.0),
    ]
    picked = {
        server: [
            (c.client, c.model, c.concurrency, c.section)
            for c in head_to_head.picked_cells(runs, server, PLAN)
        ]
        for server in head_to_head.SERVERS
    }
    section = head_to_head.SECTION
    # The best error-free cell: the C=16 one with errors does not count.
    assert picked["sluice"] == [
        ("python", "mlp_b1_w1", 1, section),
        ("python", "mlp_b8_w2_fill", 64, section),
        ("h2load", "mlp_b8_w1_eager", 64, section),
    ]
    assert picked["torchserve"] == [
        ("python", "mlp_b1_w1", 1, section),
        ("python", "mlp_b8_w1_fill", 16, section),
        ("h2load", "mlp_b8_w1_fill", 64, section),
    ]


def test_a_server_without_matrix_cells_runs_the_default_best_cell_for_each_client() -> None:
    picked = [(c.client, c.model, c.concurrency) for c in head_to_head.picked_cells([], "torchserve", PLAN)]
    assert picked == [
        ("python", "mlp_b1_w1", 1),
        ("python", "mlp_b8_w1_fill", 64),
        ("h2load", "mlp_b8_w1_fill", 64),
    ]


def test_the_quick_plan_runs_torchserve_only_head_to_head_with_its_archives_built() -> None:
    quick = presets.plan("quick")
    assert quick.with_torchserve
    assert {group.server for group in quick.groups} == {"sluice"}
    assert quick.head_to_head is not None
    names = {variant.name for variant in quick.variants()}
    assert {"mlp_b1_w1", "mlp_b8_w1_fill"} <= names
    assert "torchserve" in {group.server for group in presets.plan("full").groups}


def test_rounds_alternate_which_server_goes_first_and_the_floor_runs_in_each() -> None:
    assert [head_to_head.round_order(r) for r in range(3)] == [
        ("sluice", "torchserve", "floor"),
        ("floor", "torchserve", "sluice"),
        ("sluice", "torchserve", "floor"),
    ]


def test_the_grpc_floor_is_read_beside_the_latency_and_throughput_targets(tmp_path: Path) -> None:
    section = {"section": head_to_head.SECTION}
    runs = records()
    for round_ in range(2):
        runs.append(load("sluice", "mlp_b1_w1", 1, 800.0, 1.2, round_, **section))
        runs.append(load("torchserve", "mlp_b1_w1", 1, 900.0, 1.0, round_, **section))
        runs.append(load("floor", "mlp_b1_w1", 1, 2400.0, 0.4 + 0.1 * round_, round_, **section))
        runs.append(load("sluice", "mlp_b8_w1_fill", 64, 3000.0, 20.0, round_, **section))
        runs.append(load("torchserve", "mlp_b8_w1_fill", 64, 2500.0, 20.0, round_, **section))
        runs.append(load("floor", "mlp_b8_w1_fill", 64, 6000.0, 9.0, round_, **section))
    found = outcomes(runs)
    latency = found["mlp p50 latency at C=1 (Predictions, batching off, 1 worker)"]
    # The floor's p50 (0.45 ms) against TorchServe's (1.0 ms); the verdict stays Sluice's.
    assert latency.measured.endswith(
        "2 head-to-head rounds; the gRPC floor (a grpc.aio server that answers at once) "
        f"0.45 ms = 0.45{TIMES} TorchServe"
    )
    assert abs(latency.value - 1.2) < 1e-9
    best = found["best mlp throughput, python client"]
    assert best.measured.endswith(f"6,000 req/s = 2.40{TIMES} TorchServe")
    assert abs(best.value - 1.2) < 1e-9

    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    text = report.write(tmp_path).read_text()
    assert f"| 1.20{TIMES}, 1.20{TIMES} | 0.45 [0.40\N{EN DASH}0.50] | 0.45{TIMES} |" in text
    assert f"| 1.20{TIMES}, 1.20{TIMES} | 6,000 | 2.40{TIMES} |" in text
    # Sluice 1.2 ms, TorchServe 1.0, the floor 0.45 (medians): 0.75 and 0.55 ms beyond the floor,
    # and 1.00 x 1.0 - 0.45 = 0.55 ms left by the goal.
    assert (
        "At C=1 Sluice's path behind the gateway's gRPC (its p50 less the floor's) takes 0.75 ms, "
        f"and TorchServe's whole call 0.55 ms more than the floor's; the goal (≤ 1.00{TIMES} "
        "TorchServe) leaves 0.55 ms for everything behind the gRPC"
    ) in text


def test_the_latency_and_throughput_targets_prefer_the_head_to_head_rounds(tmp_path: Path) -> None:
    runs = records()
    runs += [
        h2load("sluice", "mlp_b8_w1_eager", 64, 5000.0),
        h2load("torchserve", "mlp_b8_w1_fill", 64, 4000.0),
    ]
    before = outcomes(runs)
    assert abs(before["best mlp throughput, python client"].value - 1.5) < 1e-9  # matrix: 3,000 vs 2,000
    assert abs(before["best mlp throughput, h2load client"].value - 1.25) < 1e-9
    section = {"section": head_to_head.SECTION}
    # Side by side the servers are closer than their matrix cells, measured far apart, said.
    for round_, (s_rps, t_rps, s_p50, t_p50) in enumerate(
        [(2800.0, 2400.0, 1.2, 1.0), (3000.0, 2500.0, 1.4, 1.1)]
    ):
        runs.append(load("sluice", "mlp_b1_w1", 1, 800.0, s_p50, round_, **section))
        runs.append(load("torchserve", "mlp_b1_w1", 1, 900.0, t_p50, round_, **section))
        runs.append(load("sluice", "mlp_b8_w1_eager", 64, s_rps, 20.0, round_, **section))
        runs.append(load("torchserve", "mlp_b8_w1_fill", 16, t_rps, 8.0, round_, **section))
    after = outcomes(runs)
    best = after["best mlp throughput, python client"]
    assert abs(best.value - 2900.0 / 2450.0) < 1e-9
    assert best.measured.endswith(f"= 1.18{TIMES}, 2 head-to-head rounds")
    latency = after["mlp p50 latency at C=1 (Predictions, batching off, 1 worker)"]
    assert abs(latency.value - 1.3 / 1.05) < 1e-9
    assert latency.measured.endswith(", 2 head-to-head rounds")
    # No h2load cells side by side: that target keeps the matrix's.
    assert abs(after["best mlp throughput, h2load client"].value - 1.25) < 1e-9
    assert "head-to-head" not in after["best mlp throughput, h2load client"].measured

    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    text = report.write(tmp_path).read_text()
    assert "## Head to head: Sluice and TorchServe in alternating rounds" in text
    assert (
        "| p50 ms at C=1 | mlp_b1_w1, C=1 | 1.30 [1.20\N{EN DASH}1.40] "
        f"| mlp_b1_w1, C=1 | 1.05 [1.00\N{EN DASH}1.10] | 1.24{TIMES} | 1.20{TIMES}, 1.27{TIMES} |"
    ) in text
    assert (
        "| best req/s, python client | mlp_b8_w1_eager, C=64 | 2,900 [2,800\N{EN DASH}3,000] "
        f"| mlp_b8_w1_fill, C=16 | 2,450 [2,400\N{EN DASH}2,500] | 1.18{TIMES} | 1.17{TIMES}, 1.20{TIMES} |"
    ) in text
