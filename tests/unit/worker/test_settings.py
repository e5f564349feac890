"""Worker settings: environment, then command-line flags on top."""

from pathlib import Path

import pytest
from sluice.typed import InvalidValue
from sluice_worker.settings import WorkerSettings, parse_args


def test_environment_is_read_and_flags_override_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_MODEL_NAME", "env-model")
    monkeypatch.setenv("SLUICE_MODEL_VERSION", "1.0")
    monkeypatch.setenv("SLUICE_WORKER_ID", "9100")
    monkeypatch.setenv("SLUICE_HEARTBEAT_INTERVAL_S", "0.5")
    monkeypatch.setenv("SLUICE_REDIS_URL", "redis://example:1/0")
    settings = parse_args(["--model-name", "cli-model", "--gpu-id", "1", "--torch-threads", "2"])
    assert (settings.model_name, settings.model_version, settings.worker_id) == ("cli-model", "1.0", "9100")
    assert (settings.gpu_id, settings.torch_threads) == (1, 2)
    assert settings.heartbeat_interval_s == 0.5
    assert settings.redis_url == "redis://example:1/0"


def test_defaults() -> None:
    settings = WorkerSettings(model_name="m", model_version="1")
    assert (settings.worker_id, settings.gpu_id, settings.torch_threads) == (None, None, None)
    assert (settings.heartbeat_interval_s, settings.heartbeat_ttl_s, settings.heartbeat_ttl_ms) == (
        1.0,
        3.0,
        3000,
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"model_name": "bad name"},
        {"worker_id": "a:b"},
        {"gpu_id": -1},
        {"torch_threads": 0},
        {"heartbeat_interval_s": 2.0, "heartbeat_ttl_s": 1.0},
    ],
)
def test_invalid_settings_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(InvalidValue):
        WorkerSettings(**{"model_name": "m", "model_version": "1", **overrides})


def test_model_name_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_MODEL_NAME", raising=False)
    with pytest.raises(InvalidValue):
        parse_args(["--model-version", "1"])


def test_decode_input_request_comes_from_config_properties(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert WorkerSettings(model_name="m", model_version="1").decode_input_request is True
    config = tmp_path / "config.properties"
    config.write_text("decode_input_request=false\n")
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    assert WorkerSettings(model_name="m", model_version="1").decode_input_request is False
