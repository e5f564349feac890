"""Token authorization, the pure parts: keys, key file, the judgement, header parsing, refusals."""

import json
import stat
from pathlib import Path

import grpc
import pytest
from sluice.auth.key_material import (
    Key,
    KeyKind,
    KeySet,
    digest,
    format_instant,
    parse_instant,
    read_key_file,
    write_key_file,
)
from sluice.auth.policy import FAILED_MESSAGE, bearer_token, refusal
from sluice.auth.settings import AuthSettings
from sluice.auth.store import StoredKey, StoredKeys, Verdict, judge
from sluice.errors import ErrorCode
from sluice.transport.exposure import is_loopback_host
from sluice.transport.status_map import rest_error_type, rest_status

NOW_MS = 1_800_000_000_000


def stored_of(keyset: KeySet) -> StoredKeys:
    return {
        kind: StoredKey(digest(keyset.get(kind).value), keyset.get(kind).expires_unix_ms) for kind in KeyKind
    }


def test_keys_are_long_url_safe_and_distinct() -> None:
    keyset = KeySet.generate(NOW_MS, 60)
    values = [keyset.get(kind).value for kind in KeyKind]
    assert len(set(values)) == 3
    for value in values:
        assert len(value) >= 43  # 32 random bytes, base64url
        assert set(value) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert keyset.inference.expires_unix_ms == NOW_MS + 60 * 60_000
    assert keyset.api.expires_unix_ms is None


def test_key_file_has_torchserve_shape_and_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "key_file.json"
    keyset = KeySet.generate(NOW_MS, 60)
    write_key_file(path, keyset)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(path.read_text())
    assert list(document) == ["management", "inference", "API"]
    assert set(document["management"]) == {"key", "expiration time"}
    assert set(document["API"]) == {"key"}
    assert document["inference"]["expiration time"].endswith("Z")
    assert read_key_file(path) == keyset
    assert not [p for p in tmp_path.iterdir() if p.name != "key_file.json"]  # no temp file left


def test_key_file_replaces_a_planted_symlink_instead_of_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "key_file.json").symlink_to(victim)
    write_key_file(tmp_path / "key_file.json", KeySet.generate(NOW_MS, 1))
    assert victim.read_text() == "untouched"
    assert not (tmp_path / "key_file.json").is_symlink()


def test_unreadable_key_files_read_as_none(tmp_path: Path) -> None:
    assert read_key_file(tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text('{"inference": {}}')
    assert read_key_file(tmp_path / "bad.json") is None


def test_instants_round_trip() -> None:
    assert parse_instant(format_instant(NOW_MS + 123)) == NOW_MS + 123


@pytest.mark.parametrize("kind", [KeyKind.INFERENCE, KeyKind.MANAGEMENT, KeyKind.API])
def test_judge_grants_only_the_right_key(kind: KeyKind) -> None:
    keyset = KeySet.generate(NOW_MS, 60)
    stored = stored_of(keyset)
    assert judge(stored, kind, keyset.get(kind).value, NOW_MS) is Verdict.GRANTED
    for other in set(KeyKind) - {kind}:
        assert judge(stored, kind, keyset.get(other).value, NOW_MS) is Verdict.WRONG_SCOPE
    assert judge(stored, kind, "wrong", NOW_MS) is Verdict.INVALID
    assert judge(stored, kind, None, NOW_MS) is Verdict.MISSING
    assert judge({}, kind, keyset.get(kind).value, NOW_MS) is Verdict.INVALID


def test_judge_refuses_expired_keys_but_not_the_api_key() -> None:
    keyset = KeySet.generate(NOW_MS, 1)
    later = NOW_MS + 60_000
    stored = stored_of(keyset)
    assert judge(stored, KeyKind.INFERENCE, keyset.inference.value, later) is Verdict.EXPIRED
    assert judge(stored, KeyKind.MANAGEMENT, keyset.management.value, later - 1) is Verdict.GRANTED
    assert judge(stored, KeyKind.API, keyset.api.value, later * 2) is Verdict.GRANTED


def test_judge_refuses_huge_tokens_without_hashing() -> None:
    stored = stored_of(KeySet.generate(NOW_MS, 1))
    assert judge(stored, KeyKind.INFERENCE, "x" * 100_000, NOW_MS) is Verdict.INVALID


@pytest.mark.parametrize(
    ("values", "token"),
    [
        (["Bearer abc"], "abc"),
        (["Bearer \t abc"], "abc"),
        ([], None),
        (["abc"], None),
        (["Bearer"], None),
        (["Bearer "], None),
        (["Bearer a b"], None),
        (["bearer abc"], None),
        (["Basic abc"], None),
        (["Bearer abc\n"], None),
        (["Bearer abc", "Bearer abc"], None),
    ],
)
def test_bearer_header_parsing(values: list[str], token: str | None) -> None:
    assert bearer_token(values) == token


def test_refusals_torchserve_codes() -> None:
    for verdict in (Verdict.MISSING, Verdict.INVALID, Verdict.EXPIRED, Verdict.WRONG_SCOPE):
        denied = refusal(verdict, "torchserve")
        assert denied is not None
        assert (denied.grpc_code, denied.http_status, denied.message) == (
            grpc.StatusCode.PERMISSION_DENIED,
            400,
            FAILED_MESSAGE,
        )
        error = denied.error()
        assert (rest_status(error), rest_error_type(error)) == (400, "InvalidKeyException")
    assert refusal(Verdict.GRANTED, "torchserve") is None


def test_refusals_standard_codes() -> None:
    for verdict in (Verdict.MISSING, Verdict.INVALID, Verdict.EXPIRED):
        denied = refusal(verdict, "standard")
        assert denied is not None
        assert (denied.grpc_code, denied.http_status) == (grpc.StatusCode.UNAUTHENTICATED, 401)
    wrong = refusal(Verdict.WRONG_SCOPE, "standard")
    assert wrong is not None
    assert (wrong.grpc_code, wrong.http_status) == (grpc.StatusCode.PERMISSION_DENIED, 403)
    unavailable = refusal(Verdict.UNAVAILABLE, "standard")
    assert unavailable is not None
    assert unavailable.error().code is ErrorCode.UNAVAILABLE


def test_auth_settings_defaults_and_torchserve_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_TS_CONFIG", "SLUICE_DISABLE_TOKEN_AUTHORIZATION"):
        monkeypatch.delenv(name, raising=False)
    defaults = AuthSettings()
    assert defaults.token_auth_enabled
    assert defaults.token_expiration_min == 60
    assert defaults.key_file == Path("key_file.json")
    assert defaults.token_error_codes == "torchserve"
    properties = tmp_path / "config.properties"
    properties.write_text("disable_token_authorization=true\ntoken_expiration_min=5\n")
    monkeypatch.setenv("TS_CONFIG_FILE", str(properties))
    configured = AuthSettings()
    assert not configured.token_auth_enabled
    assert configured.token_expiration_min == 5


def test_key_expiry_helper() -> None:
    assert Key("k", 10).expired(10)
    assert not Key("k", 10).expired(9)
    assert not Key("k").expired(10**15)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("::ffff:10.0.0.1", False),
        ("localhost", True),
        ("unix:/tmp/s.sock", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.5", False),
        ("example.com", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
