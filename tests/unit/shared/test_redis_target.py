"""Which Redis the settings mean: Sentinel URLs built from settings and read back, and a plain URL
given the password setting."""

import pytest
from sluice.redis.endpoint import Endpoint
from sluice.redis.target import (
    ClusterTarget,
    SentinelTarget,
    cluster_url,
    effective_url,
    is_cluster,
    is_shared,
    parse_cluster_url,
    parse_sentinel_url,
    parse_sentinels,
    sentinel_url,
    with_password,
)
from sluice.settings.common import CommonSettings
from sluice.typed import InvalidValue
from sluice_gateway.settings import GatewaySettings


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


def test_a_cluster_url_reads_back_what_built_it() -> None:
    url = cluster_url("10.0.0.1:7000, redis-b,redis-c:7002", password="p@ss")
    assert url == "redis+cluster://:p%40ss@10.0.0.1:7000,redis-b:6379,redis-c:7002"
    assert parse_cluster_url(url) == ClusterTarget(
        seeds=(("10.0.0.1", 7000), ("redis-b", 6379), ("redis-c", 7002)), password="p@ss"
    )
    assert parse_cluster_url("redis+cluster://app:pw@h:1/0").username == "app"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis://h:1/0", "not a Redis Cluster URL"),
        ("redis+cluster://h:1/3", "only database 0"),
        ("redis+cluster://h:port", "not a Redis Cluster node address"),
        ("redis+cluster://", "no Redis Cluster node address"),
    ],
)
def test_a_bad_cluster_url_is_refused_with_its_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_cluster_url(url)


def test_a_cluster_wins_over_the_url_but_not_with_sentinels() -> None:
    chosen = effective_url(
        "redis://h:1/0", sentinels="", master="", password="pw", sentinel_password="", cluster="c:7"
    )
    assert chosen == "redis+cluster://:pw@c:7"
    assert is_cluster(chosen)
    assert is_shared(chosen)
    assert not is_shared("redis://h:1/0")
    with pytest.raises(ValueError, match="not both"):
        effective_url(
            "redis://h:1/0", sentinels="s:2", master="m", password="", sentinel_password="", cluster="c:7"
        )


def test_settings_build_the_cluster_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_REDIS_CLUSTER", "n1:7000,n2:7001")
    settings = CommonSettings()
    assert settings.redis_url == "redis+cluster://n1:7000,n2:7001"
    assert settings.on_redis_cluster
    monkeypatch.setenv("SLUICE_REDIS_CLUSTER", "n1:none")
    with pytest.raises(InvalidValue, match="redis_cluster"):
        CommonSettings()


def test_the_gateway_refuses_wait_on_a_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_REDIS_CLUSTER", "n1:7000")
    monkeypatch.setenv("SLUICE_REDIS_WAIT_REPLICAS", "1")
    with pytest.raises(InvalidValue, match="min-replicas-to-write"):
        GatewaySettings()


def test_the_pipelined_client_reads_a_cluster_url_as_any_of_its_nodes() -> None:
    endpoint = Endpoint.from_url("redis+cluster://:pw@a:1,b:2")
    assert endpoint.cluster is not None
    assert endpoint.cluster.seeds == (("a", 1), ("b", 2))
    assert endpoint.handshake() == [("AUTH", "pw")]
