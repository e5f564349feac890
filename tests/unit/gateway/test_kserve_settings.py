"""The inference port's message limit: one gRPC limit for the port, TorchServe's kept per rpc."""

import pytest
from sluice_gateway.settings import GatewaySettings


def test_kserve_requests_may_be_larger_than_torchserves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TS_CONFIG_FILE", raising=False)
    settings = GatewaySettings()
    assert settings.max_request_size == 6553500
    assert settings.kserve_max_request_size == 64 * 1024 * 1024
    assert settings.grpc_max_receive_size == 64 * 1024 * 1024
    monkeypatch.setenv("SLUICE_KSERVE_MAX_REQUEST_SIZE", "1000")
    assert GatewaySettings().grpc_max_receive_size == 6553500
