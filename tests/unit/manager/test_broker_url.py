"""Celery's spelling of the services' Redis URL (pure)."""

from sluice_manager.operations.celery_app import broker_url


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
