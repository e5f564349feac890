"""ManagerSettings: TorchServe's config.properties keys and defaults, SLUICE_* overrides."""

from pathlib import Path

import pytest
from sluice_manager.models.registration import registration_config
from sluice_manager.models.version_config import parse_models_json
from sluice_manager.settings import ManagerSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_TS_CONFIG", "SLUICE_MODEL_STORE", "SLUICE_LOAD_MODELS",
                 "SLUICE_REDIS_URL", "SLUICE_HOME", "SLUICE_LAUNCHER"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


def test_torchserve_defaults() -> None:
    settings = ManagerSettings()
    assert settings.model_store is None
    assert settings.load_models == ""
    assert settings.models == ""
    assert settings.default_workers_per_model == 0
    assert settings.job_queue_size == 100
    assert (settings.default_response_timeout_s, settings.default_startup_timeout_s) == (120, 120)
    assert settings.launcher == "process"
    assert settings.worker_standby is True
    assert settings.enable_model_api is False
    assert settings.disable_token_authorization is False
    assert settings.models_path == Path("var/models").absolute()
    assert settings.logs_path == Path("var/logs").absolute()


def test_config_properties_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.properties"
    config.write_text(
        "\n".join(
            [
                "model_store=/srv/store",
                "load_models=a.mar,b=b.mar",
                "default_workers_per_model=2",
                "job_queue_size=7",
                "default_response_timeout=30",
                "default_startup_timeout=40",
                "service_envelope=kserve",
                "default_service_handler=image_classifier",
                "enable_model_api=true",
                "sluice_redis_url=redis://10.0.0.1:6379/0",
                "sluice_launcher=external",
                "sluice_reconcile_interval_s=0.5",
                "sluice_worker_standby=false",
                "models={\\",
                '  "noop": {\\',
                '    "1.0": {"defaultVersion": true, "batchSize": 4}\\',
                "  }\\",
                "}",
            ]
        )
    )
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    settings = ManagerSettings()
    assert settings.model_store == Path("/srv/store")
    assert settings.load_models == "a.mar,b=b.mar"
    assert (settings.default_workers_per_model, settings.job_queue_size) == (2, 7)
    assert (settings.default_response_timeout_s, settings.default_startup_timeout_s) == (30, 40)
    assert (settings.service_envelope, settings.default_service_handler) == ("kserve", "image_classifier")
    assert settings.enable_model_api is True
    assert settings.redis_url == "redis://10.0.0.1:6379/0"
    assert settings.launcher == "external"
    assert settings.reconcile_interval_s == 0.5
    assert settings.worker_standby is False
    assert parse_models_json(settings.models) == {"noop": {"1.0": {"defaultVersion": True, "batchSize": 4}}}


def test_cli_environment_beats_config_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.properties"
    config.write_text("model_store=/srv/store\nload_models=all\nsluice_redis_url=redis://a:1/0\n")
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    monkeypatch.setenv("SLUICE_MODEL_STORE", "/other/store")
    monkeypatch.setenv("SLUICE_LOAD_MODELS", "demo=demo.mar")
    monkeypatch.setenv("SLUICE_REDIS_URL", "redis://127.0.0.1:6399/0")
    monkeypatch.setenv("SLUICE_HOME", str(tmp_path / "home"))
    settings = ManagerSettings()
    assert settings.model_store == Path("/other/store")
    assert settings.load_models == "demo=demo.mar"
    assert settings.redis_url == "redis://127.0.0.1:6399/0"
    assert settings.models_path == tmp_path / "home" / "models"


def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_LAUNCHER", "kubernetes")
    with pytest.raises(ValueError, match="launcher"):
        ManagerSettings()


def test_one_registration_config_for_the_manager_and_its_task_worker(tmp_path: Path) -> None:
    settings = ManagerSettings(
        model_store=tmp_path / "store", job_queue_size=7, archive_max_entries=9, task_lock_wait_s=4.0,
        models='{"m": {"1.0": {"defaultVersion": true}}}',
    )  # fmt: skip
    config = registration_config(settings)
    assert (config.model_store, config.models_dir) == (tmp_path / "store", settings.models_path)
    assert (config.defaults.job_queue_size, config.limits.max_entries, config.lock_wait_s) == (7, 9, 4.0)
    assert config.models_json == parse_models_json(settings.models)
    with pytest.raises(ValueError, match="Expecting property name"):
        registration_config(ManagerSettings(models="{"))
