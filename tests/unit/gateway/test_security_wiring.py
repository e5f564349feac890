"""The gateway's and the manager's security wiring, without sockets: what is built from the settings,
and the warnings for listeners reachable from the network."""

import pytest
from sluice.auth.grpc_interceptor import TokenAuthInterceptor
from sluice_gateway.security import gateway_security, warn_exposure
from sluice_gateway.settings import GatewaySettings
from sluice_manager.api import security as manager_security
from sluice_manager.settings import ManagerSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_TS_CONFIG", "SLUICE_DISABLE_TOKEN_AUTHORIZATION"):
        monkeypatch.delenv(name, raising=False)


async def test_token_authorization_is_wired_by_default() -> None:
    security = gateway_security(GatewaySettings())
    assert [type(i) for i in security.interceptors] == [TokenAuthInterceptor]
    assert len(security.rest_middlewares()) == 1
    await security.aclose()


def test_disabling_it_wires_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    security = gateway_security(GatewaySettings(disable_token_authorization=True))
    assert (security.interceptors, security.rest_middlewares()) == ([], [])
    assert "token authorization is OFF" in capsys.readouterr().out


def test_loopback_defaults_log_no_warning(capsys: pytest.CaptureFixture[str]) -> None:
    warn_exposure(GatewaySettings())
    manager_security.warn_exposure(ManagerSettings())
    assert "reachable" not in capsys.readouterr().out


def test_a_non_loopback_bind_warns_about_clear_text_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    warn_exposure(GatewaySettings(grpc_inference_address="0.0.0.0", metrics_address="http://0.0.0.0:8082"))
    manager_security.warn_exposure(ManagerSettings(management_address="http://10.0.0.5:8081"))
    out = capsys.readouterr().out
    assert out.count("bearer tokens travel in clear text") == 2
    assert "listener=grpc_inference" in out
    assert "listener=management_address" in out
    assert "listener=metrics_address" in out


def test_a_non_loopback_bind_without_tokens_warns_louder(capsys: pytest.CaptureFixture[str]) -> None:
    settings = GatewaySettings(grpc_inference_address="0.0.0.0", disable_token_authorization=True)
    warn_exposure(settings)
    assert "WITHOUT token authorization" in capsys.readouterr().out


def test_manager_security_without_tokens_has_no_seams_or_token_route() -> None:
    built = manager_security.manager_security(ManagerSettings(disable_token_authorization=True), None)  # type: ignore[arg-type]
    assert built.authority is None
    assert (built.seams.grpc_interceptors, built.seams.rest_routes) == ((), ())
