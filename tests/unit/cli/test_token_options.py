"""The CLI's part in token authorization: where the manager is told to write the key file, and what
`sluice start` prints about it."""

from pathlib import Path

import pytest
from sluice_cli import output
from sluice_cli.plan import token_auth_on
from sluice_cli.runtime import PidFile
from sluice_cli.services import StartOptions, service_env
from sluice_cli.settings import CliSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "TS_CONFIG_FILE",
        "SLUICE_TS_CONFIG",
        "SLUICE_DISABLE_TOKEN_AUTHORIZATION",
        "SLUICE_KEY_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


def test_token_authorization_is_on_unless_a_flag_or_a_setting_says_otherwise() -> None:
    assert token_auth_on(CliSettings(), StartOptions())
    assert not token_auth_on(CliSettings(), StartOptions(disable_token_auth=True))
    assert not token_auth_on(CliSettings(disable_token_authorization=True), StartOptions())


def test_the_manager_gets_an_absolute_key_file_path(tmp_path: Path) -> None:
    env = service_env({}, StartOptions(), home=tmp_path, redis_url="redis://x", key_file=tmp_path / "k.json")
    assert env["SLUICE_KEY_FILE"] == str(tmp_path / "k.json")
    assert "SLUICE_KEY_FILE" not in service_env({}, StartOptions(), home=tmp_path, redis_url="redis://x")


def test_start_prints_where_the_keys_are(tmp_path: Path) -> None:
    state = PidFile(runtime_dir=str(tmp_path), started_unix_ms=0, redis_url="r", private_redis=True)
    assert "OFF" in output._tokens(state)
    state.key_file = "/srv/key_file.json"
    assert output._tokens(state).startswith("on: keys in /srv/key_file.json")
