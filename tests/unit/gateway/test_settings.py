"""Gateway settings: TorchServe keys from config.properties, defaults, validation."""

from pathlib import Path

import pytest
from sluice.typed import InvalidValue
from sluice_gateway.settings import GatewaySettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_TS_CONFIG", "SLUICE_GATEWAY_ID", "SLUICE_GRPC_INFERENCE_PORT"):
        monkeypatch.delenv(name, raising=False)


def test_torchserve_defaults() -> None:
    settings = GatewaySettings()
    assert (settings.grpc_inference_address, settings.grpc_inference_port) == ("127.0.0.1", 7070)
    assert settings.max_request_size == 6553500
    assert not settings.enable_reflection
    assert settings.default_request_timeout_s is None


def test_config_properties_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    properties = tmp_path / "config.properties"
    properties.write_text(
        "grpc_inference_address=0.0.0.0\ngrpc_inference_port=7443\nmax_request_size=1000\n"
        "sluice_redis_url=redis://r:1/0\n"
    )
    monkeypatch.setenv("TS_CONFIG_FILE", str(properties))
    settings = GatewaySettings()
    assert (settings.bind_address, settings.max_request_size) == ("0.0.0.0:7443", 1000)
    assert settings.redis_url == "redis://r:1/0"
    monkeypatch.setenv("SLUICE_GRPC_INFERENCE_PORT", "7000")
    assert GatewaySettings().grpc_inference_port == 7000  # the environment wins over the file


def test_gateway_ids_are_random_and_key_safe() -> None:
    first, second = GatewaySettings().gateway_id, GatewaySettings().gateway_id
    assert first != second
    with pytest.raises(InvalidValue):
        GatewaySettings(gateway_id="a}b")


def test_ipv6_bind_address() -> None:
    assert GatewaySettings(grpc_inference_address="::1", grpc_inference_port=1).bind_address == "[::1]:1"


def test_rest_and_metrics_addresses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    defaults = GatewaySettings()
    assert (defaults.inference_address, defaults.metrics_address) == (
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8082",
    )
    assert defaults.enable_metrics_api is True
    config = tmp_path / "config.properties"
    config.write_text(
        "inference_address=http://0.0.0.0:9080\nmetrics_address=unix:/tmp/m.sock\nenable_metrics_api=false\n"
    )
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    settings = GatewaySettings()
    assert (settings.inference_address, settings.metrics_address) == (
        "http://0.0.0.0:9080",
        "unix:/tmp/m.sock",
    )
    assert settings.enable_metrics_api is False
