"""Sluice's Redis clients through real Redis Sentinels (a master, two replicas, three Sentinels on
loopback): they find the master, lose their connection when it dies or is demoted, and carry on with
the master a failover promoted; a Sentinel URL that leads nowhere fails with a message naming it."""

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sluice.redis.client import connect, connect_sync
from sluice.redis.errors import RedisDown
from sluice.redis.pipelined import PipelinedRedis
from sluice.redis.sentinel import NoMaster, master_address, master_address_sync
from sluice.redis.target import parse_sentinel_url
from sluice_manager.operations.celery_app import celery_app

from tests.support.redis_sentinel import MASTER_NAME, SentinelGroup, sentinel_group
from tests.support.redis_server import free_port

# Bounds for the loops that wait out a failover (each is a few seconds on an idle machine).
RECOVERY_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    with sentinel_group(tmp_path_factory.mktemp("sentinel")) as started:
        yield started


async def until_answered(client: PipelinedRedis, *command: str) -> object:
    """The reply to ``command``, retried while Redis is down (a failover under way)."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        try:
            return await client.execute(*command)
        except RedisDown:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_sentinels_name_the_master(group: SentinelGroup) -> None:
    target = parse_sentinel_url(group.url)
    port = group.master().port
    assert await master_address(target, 2.0) == ("127.0.0.1", port)
    assert master_address_sync(target, 2.0) == ("127.0.0.1", port)


async def test_pipelined_client_follows_a_killed_master(group: SentinelGroup) -> None:
    client = PipelinedRedis(group.url, timeout_s=2.0, name="test")
    try:
        assert await client.execute("SET", "before-kill", "kept") == b"OK"
        replicated = group.master_client().wait(2, 5000)
        assert replicated == 2
        old = group.kill_master()
        with pytest.raises(RedisDown):
            await client.execute("GET", "before-kill")
        assert await until_answered(client, "GET", "before-kill") == b"kept"
        new = group.wait_for_failover(old.port)
        assert await client.execute("SET", "after-kill", "1") == b"OK"
        assert redis.Redis(port=new.port).get("after-kill") == b"1"
        group.rejoin(old)
    finally:
        await client.close()


async def test_pipelined_client_leaves_a_demoted_master(group: SentinelGroup) -> None:
    """A manual failover leaves the old master running as a replica: a write there is refused
    (READONLY), which drops the connection, and the next command reaches the new master."""
    client = PipelinedRedis(group.url, timeout_s=2.0, name="test")
    try:
        assert await client.execute("SET", "demoted", "0") == b"OK"
        old_port = group.master().port
        group.sentinels[0].client().sentinel_failover(MASTER_NAME)
        group.wait_for_failover(old_port)
        assert await until_answered(client, "INCR", "demoted") == 1
        role = await client.execute("ROLE")
        assert role[0] == b"master"
    finally:
        await client.close()


async def test_redis_py_client_follows_a_killed_master(group: SentinelGroup) -> None:
    client = connect(group.url)
    try:
        await client.set("redis-py", "kept")
        assert group.master_client().wait(2, 5000) == 2
        old = group.kill_master()
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            try:
                assert await client.get("redis-py") == b"kept"
                break
            except (RedisConnectionError, redis.TimeoutError):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        group.wait_for_failover(old.port)
        group.rejoin(old)
    finally:
        await client.aclose()
    sync_client = connect_sync(group.url, timeout_s=2.0)
    try:
        assert sync_client.get("redis-py") == b"kept"
    finally:
        sync_client.close()


async def test_no_sentinel_answering_is_named() -> None:
    ports = [free_port(), free_port()]
    target = parse_sentinel_url(f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/absent/0")
    with pytest.raises(NoMaster) as raised:
        await master_address(target, 0.5)
    message = str(raised.value)
    assert all(f"127.0.0.1:{port}" in message for port in ports)
    client = PipelinedRedis(f"redis+sentinel://127.0.0.1:{ports[0]}/absent/0", timeout_s=1.0, name="test")
    try:
        with pytest.raises(RedisDown, match=f"127.0.0.1:{ports[0]}"):
            await client.execute("PING")
    finally:
        await client.close()


async def test_a_master_name_the_sentinels_do_not_know_is_named(group: SentinelGroup) -> None:
    url = group.url.replace(f"/{MASTER_NAME}/", "/nobody/")
    with pytest.raises(NoMaster, match="knows no master named 'nobody'"):
        master_address_sync(parse_sentinel_url(url), 1.0)


def test_celery_reaches_the_master_through_the_sentinels(group: SentinelGroup, tmp_path: Path) -> None:
    """The manager's Celery app on a Sentinel URL: a message sent lands in the master's queue."""
    app = celery_app(group.url, visibility_timeout_s=60)
    try:
        app.send_task("sluice.test_task", args=["x"], queue="sentinel-test")
        with group.master_client() as master:
            queued = [key for key in master.keys("*sentinel-test*")]
            assert queued, "Celery's message is not on the master"
    finally:
        app.close()
