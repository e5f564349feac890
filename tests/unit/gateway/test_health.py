"""TorchServe's Ping text (pure)."""

from sluice_gateway.health import health_text, version_healthy


def test_health_text_is_torchserves_pretty_json() -> None:
    assert health_text(True) == '{\n  "status": "Healthy"\n}'
    assert health_text(False) == '{\n  "status": "Unhealthy"\n}'


def test_a_version_is_healthy_with_at_least_min_workers() -> None:
    assert version_healthy(min_workers=0, live_workers=0)
    assert version_healthy(min_workers=2, live_workers=2)
    assert not version_healthy(min_workers=1, live_workers=0)
