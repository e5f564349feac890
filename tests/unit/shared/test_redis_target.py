"""Which Redis the settings mean: Sentinel URLs built from settings and read back, and a plain URL
given the password setting."""

import pytest
from sluice.redis.pipelined import Endpoint
from sluice.redis.target import (
    SentinelTarget,
    effective_url,
    parse_sentinel_url,
    parse_sentinels,
    sentinel_url,
    with_password,
)
from sluice.settings.common import CommonSettings
from sluice.typed import InvalidValue


def test_a_sentinel_url_reads_back_what_built_it() -> None:
    url = sentinel_url(
        "10.0.0.1:26379, redis-b:26380,redis-c", "main", password="p@ss", sentinel_password="s"
    )
    assert (
        url
        == "redis+sentinel://:p%40ss@10.0.0.1:26379,redis-b:26380,redis-c:26379/main/0?sentinel_password=s"
    )
    assert parse_sentinel_url(url) == SentinelTarget(
        sentinels=(("10.0.0.1", 26379), ("redis-b", 26380), ("redis-c", 26379)),
        master="main",
        password="p@ss",
        sentinel_password="s",
    )


def test_a_sentinel_url_names_user_and_database() -> None:
    target = parse_sentinel_url("redis+sentinel://app:pw@h:1/m/3")
    assert (target.username, target.password, target.db, target.sentinels) == ("app", "pw", 3, (("h", 1),))


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h:1/0", "not a Redis Sentinel URL"),
        ("redis+sentinel://h:1", "names its master"),
        ("redis+sentinel://h:1/m/x", "bad path"),
        ("redis+sentinel://h:port/m", "not a Sentinel address"),
        ("redis+sentinel:///m", "no Sentinel address"),
    ],
)
def test_a_bad_sentinel_url_is_refused_with_its_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_sentinel_url(url)


def test_sentinel_addresses_default_their_port() -> None:
    assert parse_sentinels("a,b:1,[::1]:2") == (("a", 26379), ("b", 1), ("::1", 2))


def test_the_password_setting_goes_into_a_plain_url_without_one() -> None:
    assert with_password("redis://h:1/0", "p w") == "redis://:p%20w@h:1/0"
    assert with_password("redis://:own@h:1/0", "other") == "redis://:own@h:1/0"
    assert with_password("unix:///r.sock?db=0", "pw") == "unix:///r.sock?db=0"


def test_sentinels_win_over_the_url_and_need_a_master_name() -> None:
    chosen = effective_url("redis://h:1/0", sentinels="s:2", master="m", password="", sentinel_password="")
    assert chosen == "redis+sentinel://s:2/m/0"
    with pytest.raises(ValueError, match="sluice_redis_sentinel_master"):
        effective_url("redis://h:1/0", sentinels="s:2", master="", password="", sentinel_password="")


def test_settings_build_the_sentinel_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_REDIS_SENTINELS", "s1:26379,s2:26379")
    monkeypatch.setenv("SLUICE_REDIS_SENTINEL_MASTER", "sluice")
    monkeypatch.setenv("SLUICE_REDIS_PASSWORD", "pw")
    assert CommonSettings().redis_url == "redis+sentinel://:pw@s1:26379,s2:26379/sluice/0"
    monkeypatch.setenv("SLUICE_REDIS_SENTINELS", "s1:none")
    with pytest.raises(InvalidValue, match="redis_sentinels"):
        CommonSettings()


def test_the_pipelined_client_reads_a_sentinel_url() -> None:
    endpoint = Endpoint.from_url("redis+sentinel://:pw@s:1/m/2")
    assert endpoint.sentinel is not None
    assert endpoint.handshake() == [("AUTH", "pw"), ("SELECT", 2), ("ROLE",)]
