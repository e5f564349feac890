"""Sluice's Redis clients on a real Redis Cluster (three masters on loopback): commands reach the master
of their key's slot, in order per slot; a slot being migrated (ASK, TRYAGAIN, a blocked read whose
stream moved away) or migrated (MOVED) costs the caller nothing but time; writes that span slots run
in order; pub/sub, transactions and Celery's broker work; a cluster that cannot be reached is named."""

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sluice.auth.key_material import KeyKind, KeySet, digest, new_key
from sluice.auth.store import TokenStore
from sluice.redis import keys
from sluice.redis.client import connect
from sluice.redis.cluster import ClusterRedis
from sluice.redis.cluster_probe import NoSlotMap, slot_owner_sync
from sluice.redis.control import ControlRedis, Subscription
from sluice.redis.errors import RedisDown
from sluice.redis.link import open_link
from sluice.redis.pipelined import PipelinedRedis
from sluice.redis.slots import key_slot
from sluice.redis.target import parse_cluster_url
from sluice.redis.writes import InOrder, ordered_writes
from sluice_manager.operations.celery_app import celery_app
from sluice_manager.operations.cluster_transport import CELERY_SLOT

from tests.support.redis_cluster import ClusterNodeServer, RedisClusterGroup, redis_cluster
from tests.support.redis_server import RedisServer, free_port


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterGroup]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


def elsewhere(cluster: RedisClusterGroup, key: str) -> ClusterNodeServer:
    owner = cluster.owner_of(key)
    return next(master for master in cluster.masters if master is not owner)


def move_key(source: ClusterNodeServer, target: ClusterNodeServer, key: str) -> None:
    source.client().execute_command("MIGRATE", "127.0.0.1", target.port, key, 0, 5000)  # type: ignore[no-untyped-call]


async def test_commands_reach_the_master_of_their_slot_in_order(cluster: RedisClusterGroup) -> None:
    client = open_link(cluster.url, name="test")
    assert isinstance(client, ClusterRedis)
    assert not client.ordered
    try:
        names = [f"route:{number}" for number in range(60)]
        # Sent before the slot map is known: they wait for it, and keep their order per key.
        sets = [client.send("SET", name, 1) for name in names]
        increments = [client.send("INCR", name) for name in names]
        await asyncio.gather(*sets)
        assert await asyncio.gather(*increments) == [2] * len(names)
        masters = set()
        for name in names:
            owner = cluster.owner_of(name)
            assert owner.client().get(name) == b"2"
            masters.add(owner.port)
        assert len(masters) == 3
        # A script runs on the master of its keys (loaded there by EVAL when it does not know it).
        script = "return redis.call('GET', KEYS[1])"
        assert await client.evalsha("0" * 40, script, [names[0]], []) == b"2"
    finally:
        await client.close()


async def test_a_migrated_slot_is_followed_to_its_new_master(cluster: RedisClusterGroup) -> None:
    client = ClusterRedis(cluster.url, name="test")
    try:
        key = "moved:{one}"
        await client.execute("SET", key, "here")
        before = client.owner(key)
        target = elsewhere(cluster, key)
        cluster.migrate_slot(key_slot(key), target)
        assert await client.execute("GET", key) == b"here"  # MOVED, then the new master
        assert client.owner(key) == ("127.0.0.1", target.port) != before
    finally:
        await client.close()


async def test_a_slot_being_migrated_answers_from_both_masters(cluster: RedisClusterGroup) -> None:
    client = ClusterRedis(cluster.url, name="test")
    first, second = "asking:{two}:a", "asking:{two}:b"
    slot = key_slot(first)
    try:
        await client.execute("SET", first, "moved")
        await client.execute("SET", second, "stays")
        target = elsewhere(cluster, first)
        source = cluster.begin_migration(slot, target)
        move_key(source, target, first)
        # ASK: the moved key is read from the importing master, the other from the source.
        assert await client.execute("GET", first) == b"moved"
        assert await client.execute("GET", second) == b"stays"
        # TRYAGAIN: keys split between the masters; answered once the migration ends.
        finishing = threading.Timer(0.3, lambda: cluster.migrate_slot(slot, target))
        finishing.start()
        assert await client.execute("MGET", first, second) == [b"moved", b"stays"]
        finishing.join()
        assert cluster.owner_of(first) is target
    finally:
        await client.close()


async def test_a_blocked_read_follows_its_stream_to_its_new_master(cluster: RedisClusterGroup) -> None:
    reader = ClusterRedis(cluster.url, name="reader", timeout_s=10)
    writer = ClusterRedis(cluster.url, name="writer")
    stream = keys.job_stream("blocked", "1")
    try:
        await writer.execute("XADD", stream, "*", "n", "0")
        reading = reader.send("XREAD", "BLOCK", 8000, "STREAMS", stream, "$")
        await asyncio.sleep(0.3)
        # The stream leaves its master under the blocked read (UNBLOCKED), then the slot (MOVED).
        await asyncio.to_thread(cluster.migrate_slot, key_slot(stream), elsewhere(cluster, stream))
        await asyncio.sleep(0.3)
        await writer.execute("XADD", stream, "*", "n", "1")
        answer: Any = await reading
        [[_name, [[_id, fields]]]] = answer
        assert fields == [b"n", b"1"]
    finally:
        await reader.close()
        await writer.close()


async def test_control_client_transactions_and_pub_sub(cluster: RedisClusterGroup) -> None:
    control = ControlRedis(cluster.url, name="test")
    try:
        async with control.pipeline(transaction=True) as pipe:
            pipe.delete(keys.AUTH_KEYS)
            pipe.hset(keys.AUTH_KEYS, mapping={"inference": "digest"})
            await pipe.execute()
        assert await control.hgetall(keys.AUTH_KEYS) == {b"inference": b"digest"}
        async with Subscription(cluster.url, timeout_s=5, name="events") as subscription:
            await subscription.subscribe(keys.EVENTS_CHANNEL)
            assert (await subscription.get_message(5))["type"] == "subscribe"  # type: ignore[index]
            # Published through every master, the subscriber's and others: the cluster relays them.
            for master in cluster.masters:
                master.client().publish(keys.EVENTS_CHANNEL, f"from {master.port}")
            received = [await subscription.get_message(5) for _ in cluster.masters]
        assert {message["data"] for message in received if message} == {
            f"from {master.port}".encode() for master in cluster.masters
        }
    finally:
        await control.aclose()


async def test_writes_across_slots_run_in_order_on_a_cluster(cluster: RedisClusterGroup) -> None:
    client = connect(cluster.url)
    try:
        writes = ordered_writes(client)
        assert isinstance(writes, InOrder)
        model_key, version_key = keys.model("ordered"), keys.version_config("ordered", "1")
        assert key_slot(model_key) != key_slot(version_key)
        async with writes as pipe:
            pipe.hset(version_key, mapping={"record": "{}"})
            pipe.hset(model_key, "default", "1")
            pipe.zadd(keys.MODELS, {"ordered": 0})
            pipe.publish(keys.EVENTS_CHANNEL, "registered")
            assert await pipe.execute() == [1, 1, 1, 0]
        assert await client.hget(model_key, "default") == b"1"
    finally:
        await client.aclose()


async def test_token_keys_installed_by_the_manager_are_read_by_gateways(cluster: RedisClusterGroup) -> None:
    """The manager's transactions on one slot run through redis-py's Cluster client."""
    now_ms = int(time.time() * 1000)
    manager, gateway = connect(cluster.url), ControlRedis(cluster.url, name="test")
    try:
        await TokenStore(manager).install(KeySet.generate(now_ms, 60))
        rotated = new_key(KeyKind.INFERENCE, now_ms, 60)
        await TokenStore(manager).put(KeyKind.INFERENCE, rotated)
        stored = await TokenStore(gateway).load()
        assert set(stored) == set(KeyKind)
        assert stored[KeyKind.INFERENCE].digest == digest(rotated.value)
    finally:
        await manager.aclose()
        await gateway.aclose()


def test_celery_queues_on_the_master_of_its_slot(cluster: RedisClusterGroup) -> None:
    app = celery_app(cluster.url, visibility_timeout_s=60)
    try:
        app.send_task("sluice.test_task", args=["x"], queue="cluster-test")
        owner = cluster.owner_of_slot(CELERY_SLOT)
        assert slot_owner_sync(parse_cluster_url(cluster.url), CELERY_SLOT, 2.0) == ("127.0.0.1", owner.port)
        queued = owner.client().lrange(keys.CELERY_PREFIX + "cluster-test", 0, -1)
        assert len(queued) == 1
        assert b"sluice.test_task" in queued[0]
    finally:
        app.close()


async def test_a_cluster_nobody_answers_for_is_named() -> None:
    ports = [free_port(), free_port()]
    url = "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports)
    client = ClusterRedis(url, name="test")
    started = time.monotonic()
    try:
        with pytest.raises(RedisDown, match="slot map") as failed:
            await client.execute("GET", "k")
    finally:
        await client.close()
    assert time.monotonic() - started < 15
    assert all(f"127.0.0.1:{port}" in str(failed.value) for port in ports)
    with pytest.raises(NoSlotMap) as probed:
        slot_owner_sync(parse_cluster_url(url), 0, 1.0)
    assert all(f"127.0.0.1:{port}" in str(probed.value) for port in ports)


async def test_a_replica_refusing_a_write_fails_the_command(tmp_path: Path) -> None:
    """A write to a replica (a master demoted under the client) fails with RedisDown at once, and the
    connection is dropped; it never waits forever."""
    master = RedisServer(tmp_path / "master", appendonly=False)
    master.start()
    replica = RedisServer(
        tmp_path / "replica", appendonly=False, extra_args=["--replicaof", "127.0.0.1", str(master.port)]
    )
    replica.start()
    client = PipelinedRedis(replica.url, timeout_s=30, name="test")
    try:
        with pytest.raises(RedisDown, match="no longer the master"):
            await asyncio.wait_for(client.execute("SET", "k", "v"), 10)
    finally:
        await client.close()
        replica.stop()
        master.stop()


async def test_the_client_follows_a_failover_to_the_promoted_replica(tmp_path: Path) -> None:
    """A master SIGKILLed: its commands fail with RedisDown until its replica is promoted, then reach
    it, with what the replica had (written with WAIT before the kill)."""
    with redis_cluster(tmp_path, replicas=1) as group:
        client = ClusterRedis(group.url, name="test", timeout_s=2)
        try:
            key = "failover:{three}"
            await client.execute("SET", key, "kept")
            victim = group.owner_of(key)
            assert victim.client().wait(1, 5000) == 1
            victim.kill()
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert await client.execute("GET", key) == b"kept"
                    break
                except RedisDown:
                    assert time.monotonic() < deadline, "no failover within 60 s"
                    await asyncio.sleep(0.1)
            assert client.owner(key) != ("127.0.0.1", victim.port)
        finally:
            await client.close()
