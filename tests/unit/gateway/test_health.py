"""TorchServe's Ping text and model health (on an in-memory ClusterReader)."""

from sluice_gateway.health import ModelHealth, health_text, version_healthy

from tests.unit.gateway.fakes import FakeClusterReader, record, worker


def test_health_text_is_torchserves_pretty_json() -> None:
    assert health_text(True) == '{\n  "status": "Healthy"\n}'
    assert health_text(False) == '{\n  "status": "Unhealthy"\n}'


def test_a_version_is_healthy_with_at_least_min_workers() -> None:
    assert version_healthy(min_workers=0, live_workers=0)
    assert version_healthy(min_workers=2, live_workers=2)
    assert not version_healthy(min_workers=1, live_workers=0)


async def test_model_health_counts_each_default_versions_live_workers() -> None:
    reader = FakeClusterReader()
    reader.put(record(version="1.0", min_workers=1))
    reader.put(record(version="2.0", min_workers=3), default=False)  # not the default: not counted
    health = ModelHealth(reader)
    assert not await health.healthy()
    reader.workers[("echo", "1.0")] = [worker()]
    assert await health.healthy()
    reader.down = True
    assert not await health.healthy(), "a broker that does not answer is unhealthy"
