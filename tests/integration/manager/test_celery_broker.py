"""The control-plane Celery app reaches Redis through a unix socket URL, in the URL's database."""

from collections.abc import Iterator

import pytest
import redis
from sluice.redis import keys
from sluice_manager.operations.celery_app import QUEUE, celery_app, submit

from tests.support.redis_server import RedisServer, redis_with_socket


@pytest.fixture
def socket_redis() -> Iterator[RedisServer]:
    with redis_with_socket() as server:
        yield server


def test_tasks_are_queued_through_a_unix_socket(socket_redis: RedisServer) -> None:
    app = celery_app(socket_redis.unix_url(db=2), visibility_timeout_s=60)
    submit(app, "op-1")
    database_2 = redis.Redis(port=socket_redis.port, db=2)
    queued = database_2.lrange(keys.CELERY_PREFIX + QUEUE, 0, -1)
    assert len(queued) == 1
    assert b"op-1" in queued[0]
    assert redis.Redis(port=socket_redis.port, db=0).dbsize() == 0
