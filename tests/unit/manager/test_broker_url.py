"""Celery's spelling of the services' Redis URL (pure)."""

from sluice_manager.operations.celery_app import broker_url, transport_options


def test_tcp_urls_are_used_as_they_are() -> None:
    assert broker_url("redis://10.0.0.1:6379/2") == "redis://10.0.0.1:6379/2"
    assert broker_url("rediss://:pw@host:6380/0") == "rediss://:pw@host:6380/0"


def test_a_unix_socket_becomes_kombus_socket_url_with_its_database() -> None:
    assert (
        broker_url("unix:///var/run/redis.sock?db=3") == "redis+socket:///var/run/redis.sock?virtual_host=3"
    )
    assert broker_url("unix:///var/run/redis.sock") == "redis+socket:///var/run/redis.sock?virtual_host=0"


def test_a_unix_socket_keeps_its_credentials() -> None:
    assert broker_url("unix://app:p%40ss@/r.sock?db=1") == "redis+socket://app:p%40ss@/r.sock?virtual_host=1"
    assert broker_url("unix:///r.sock?db=1&password=s3") == "redis+socket://:s3@/r.sock?virtual_host=1"


def test_a_cluster_goes_through_sluices_transport_with_the_whole_url_in_its_options() -> None:
    url = "redis+cluster://:pw@a:7000,b:7001"
    assert broker_url(url) == "sluice-cluster://a:7000/0"
    assert transport_options(url, 60)["cluster_url"] == url
    assert "cluster_url" not in transport_options("redis://a:1/0", 60)
