"""TorchServe's ``model_snapshot`` key, as KServe's TorchServe config.properties carries it."""

import json

import pytest
from sluice_manager.models.load_models import StartupModelSpec
from sluice_manager.models.model_snapshot import merged_models_json, parse_model_snapshot

KSERVE_SNAPSHOT = {
    "name": "startup.cfg",
    "modelCount": 2,
    "models": {
        "mnist": {
            "1.0": {"defaultVersion": True, "marName": "mnist.mar", "minWorkers": 1, "maxWorkers": 5,
                    "batchSize": 4, "maxBatchDelay": 10, "responseTimeout": 120},
            "2.0": {"marName": "mnist-v2.mar", "minWorkers": 0, "maxWorkers": 1},
        },
        "echo": {"1": {"marName": "echo.mar"}},
    },
}  # fmt: skip


def test_each_version_is_registered_from_its_archive_with_its_settings() -> None:
    snapshot = parse_model_snapshot(json.dumps(KSERVE_SNAPSHOT))
    assert snapshot.specs == [
        StartupModelSpec(url="mnist.mar", model_name="mnist"),
        StartupModelSpec(url="mnist-v2.mar", model_name="mnist"),
        StartupModelSpec(url="echo.mar", model_name="echo"),
    ]
    assert snapshot.models_json["mnist"]["1.0"] == {
        "minWorkers": 1,
        "maxWorkers": 5,
        "batchSize": 4,
        "maxBatchDelay": 10,
        "responseTimeout": 120,
    }
    assert snapshot.models_json["echo"] == {"1": {}}
    assert snapshot.defaults == {"mnist": "1.0"}


def test_the_models_key_wins_over_the_snapshot() -> None:
    snapshot = parse_model_snapshot(json.dumps(KSERVE_SNAPSHOT))
    merged = merged_models_json(snapshot.models_json, {"mnist": {"1.0": {"batchSize": 8}}, "x": {"1": {}}})
    assert merged["mnist"]["1.0"]["batchSize"] == 8
    assert merged["mnist"]["1.0"]["maxWorkers"] == 5
    assert merged["x"] == {"1": {}}
    assert snapshot.models_json["mnist"]["1.0"]["batchSize"] == 4  # not changed in place


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[]", "must be a JSON object"),
        ('{"models": {"m": ["1.0"]}}', "model 'm' must map versions"),
        ('{"models": {"m": {"1.0": {"minWorkers": 1}}}}', "m 1.0 has no marName"),
    ],
)
def test_a_bad_snapshot_is_named(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_model_snapshot(text)


def test_no_snapshot_loads_nothing() -> None:
    assert parse_model_snapshot("").specs == []
