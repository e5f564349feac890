import yaml

from bench import matrix, presets
from bench.models import Variant


def test_variant_names_and_batching_labels() -> None:
    assert Variant("mlp").name == "mlp_b1_w1"
    assert Variant("mlp").batching == "off"
    eager = Variant("cnn", batch_size=8, policy="eager", workers=2)
    assert eager.name == "cnn_b8_w2_eager"
    assert eager.batching == "eager"
    assert Variant("stream").name == "stream"


def test_model_config_carries_the_settings_both_servers_read() -> None:
    config = yaml.safe_load(
        Variant("mlp", batch_size=8, max_batch_delay_ms=5, policy="eager", workers=2).model_config_yaml()
    )
    assert (config["batchSize"], config["maxBatchDelay"], config["batchPolicy"]) == (8, 5, "eager")
    assert (config["minWorkers"], config["maxWorkers"]) == (2, 2)
    assert config["handler"]["input_shape"] == [64]
    assert config["sluice"]["tensor_handler"] is True
    # Idle models get their (zero) workers from config.properties, so the yaml must not set any.
    assert "minWorkers" not in Variant("idle").model_config()


def test_full_plan_covers_the_issue_matrix() -> None:
    plan = presets.plan("full")
    assert plan.reps >= 3
    cells = [(g.server, c) for g in plan.groups for c in g.cells]
    grid = {(s, c.model, c.concurrency) for s, c in cells if c.section == "matrix" and c.api == "predictions"}
    for server in ("sluice", "torchserve"):
        for model in (
            "mlp_b1_w1",
            "mlp_b8_w1_fill",
            "mlp_b1_w2",
            "mlp_b8_w2_fill",
            "cnn_b1_w1",
            "cnn_b8_w2_fill",
        ):
            for concurrency in (1, 4, 16, 64):
                assert (server, model, concurrency) in grid
    # Both batch policies on Sluice; TorchServe has none.
    assert ("sluice", "mlp_b8_w1_eager", 1) in grid
    assert not any(s == "torchserve" and "eager" in m for s, m, _ in grid)
    apis = {c.api for _, c in cells}
    assert apis == {"predictions", "kserve", "rest", "stream"}
    assert {c.client for _, c in cells} == {"python", "h2load"}
    assert any(g.idle_models == 100 for g in plan.groups)
    assert any(g.soak_s >= 60 for g in plan.groups)
    assert any(g.held_streams >= 1000 for g in plan.groups)
    ts_mlp = next(g for g in plan.groups if g.server == "torchserve" and g.label == "mlp")
    assert ts_mlp.warmup_s >= 60


def test_h2load_covers_every_batched_mlp_archive_of_each_server() -> None:
    plan = presets.plan("full")
    for server in ("sluice", "torchserve"):
        group = next(g for g in plan.groups if g.server == server and g.label == "mlp")
        driven = {c.model for c in group.cells if c.client == "h2load"}
        batched = {v.name for v in group.variants if v.batch_size > 1}
        assert batched <= driven
        assert {"mlp_b1_w1", "mlp_b8_w2_fill"} <= driven


def test_each_sluice_cnn_configuration_gets_its_own_start() -> None:
    groups = [g for g in presets.plan("full").groups if g.server == "sluice" and g.label.startswith("cnn")]
    assert all(len(g.variants) == 1 for g in groups)
    assert len(groups) >= 4


def test_smoke_plan_is_small_and_sluice_only() -> None:
    plan = presets.plan("smoke")
    assert {g.server for g in plan.groups} == {"sluice"}
    assert not plan.with_torchserve
    assert all(c.client == "python" for g in plan.groups for c in g.cells)
    seconds = sum(c.duration_s + c.warmup_s for g in plan.groups for c in g.cells)
    assert seconds < 20


def test_paired_rounds_alternate_batching_off_and_eager_on_sluice_only() -> None:
    plan = presets.plan("full")
    sluice = next(g for g in plan.groups if g.server == "sluice" and g.label == "mlp")
    order = [(round_, cell.model) for round_, cell in sluice.paired]
    assert order[:4] == [
        (0, "mlp_b1_w1"),
        (0, "mlp_b8_w1_eager"),
        (1, "mlp_b8_w1_eager"),
        (1, "mlp_b1_w1"),
    ]
    assert len(order) == 16
    cells = [c for _, c in sluice.paired if isinstance(c, matrix.LoadCell)]
    assert len(cells) == 16
    assert {(c.concurrency, c.section, c.api) for c in cells} == {(1, "paired", "predictions")}
    torchserve = next(g for g in plan.groups if g.server == "torchserve" and g.label == "mlp")
    assert torchserve.paired == ()
    (smoke,) = presets.plan("smoke").groups
    assert len(smoke.paired) == 2


def test_cnn_fill_archives_alternate_with_in_process_windows_on_sluice_only() -> None:
    plan = presets.plan("full")
    by_label = {(g.server, g.label): g for g in plan.groups}
    paired = by_label[("sluice", "cnn_b8_w1_fill")].paired
    kinds = [(round_, getattr(item, "api", "inprocess")) for round_, item in paired]
    assert kinds[:6] == [
        (0, "inprocess"), (0, "predictions"), (0, "kserve"),
        (1, "kserve"), (1, "predictions"), (1, "inprocess"),
    ]  # fmt: skip
    assert len(paired) == 12
    windows = {item for _, item in paired if isinstance(item, matrix.InprocessWindow)}
    assert windows == {matrix.InprocessWindow("cnn", 8, 8.0, 2.0)}
    cells = {item for _, item in paired if isinstance(item, matrix.LoadCell)}
    assert {(c.api, c.model, c.concurrency, c.section) for c in cells} == {
        ("predictions", "cnn_b8_w1_fill", 64, "paired"),
        ("kserve", "cnn_b8_w1_fill", 64, "paired"),
    }
    assert by_label[("sluice", "cnn_b8_w2_fill")].paired
    assert by_label[("sluice", "cnn_b1_w1")].paired == ()
    assert by_label[("sluice", "cnn_b8_w1_eager")].paired == ()
    assert by_label[("torchserve", "cnn")].paired == ()


def test_a_plan_of_one_cnn_start_still_builds_the_archive_its_in_process_windows_load() -> None:
    plan = presets.only(presets.plan("full"), ["cnn_b8_w1_fill"])
    assert plan.inprocess == ()
    assert {v.name for v in plan.variants()} >= {"cnn_b8_w1_fill", "cnn_b1_w1"}
