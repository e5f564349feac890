"""The gateway's control-plane client against a real redis-server: redis-py's reply shapes,
batches and transactions, scripts, pub/sub, and what a lost Redis looks like."""

import asyncio
import signal
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from sluice.redis.control import ControlRedis
from sluice.redis.errors import RedisDown, ReplyError
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore

from tests.support.redis_server import RedisServer


@pytest.fixture
async def control(redis_server: RedisServer) -> AsyncIterator[ControlRedis]:
    client = ControlRedis(redis_server.url, timeout_s=2.0)
    try:
        yield client
    finally:
        await client.aclose()


async def test_replies_have_redis_py_shapes(control: ControlRedis, redis_client: "aioredis.Redis") -> None:
    await redis_client.hset("h", mapping={"a": "1", "b": "2"})
    await redis_client.zadd("z", {"m1": 1, "m2": 2})
    await redis_client.set("k", "v")
    assert await control.hgetall("h") == await redis_client.hgetall("h") == {b"a": b"1", b"b": b"2"}
    assert await control.hgetall("missing") == {}
    assert await control.hget("h", "a") == b"1"
    assert await control.hkeys("h") == [b"a", b"b"]
    assert await control.zrange("z", 0, -1) == [b"m1", b"m2"]
    assert (await control.get("k"), await control.get("nothing")) == (b"v", None)
    assert (await control.exists("k", "h", "nothing"), await control.delete("k")) == (2, 1)
    assert await control.ping() is True


async def test_the_shared_registry_reads_work_on_it(
    control: ControlRedis, redis_client: "aioredis.Redis"
) -> None:
    record = VersionRecord(model_name="m", version="1", model_url="m.mar", model_dir="/d", handler="h.py")
    await RegistryStore(redis_client).add(record, make_default=True)
    assert await registry.model_versions(control, "m") == await registry.model_versions(redis_client, "m")
    assert await registry.get_version(control, "m", "1") == record
    assert await registry.live_workers(control, "m", "1") == []


async def test_a_batch_answers_in_order_and_raises_the_first_failure(control: ControlRedis) -> None:
    async with control.pipeline(transaction=False) as batch:
        batch.hset("h", mapping={"f": "v"}).exists("h").hgetall("h").xlen("nothing")
        assert await batch.execute() == [1, 1, {b"f": b"v"}, 0]
    async with control.pipeline(transaction=False) as batch:
        batch.hkeys("h").xlen("h")  # XLEN of a hash: WRONGTYPE
        with pytest.raises(ReplyError, match="WRONGTYPE"):
            await batch.execute()


async def test_a_transaction_applies_all_or_reports_the_failure(
    control: ControlRedis, redis_client: "aioredis.Redis"
) -> None:
    await redis_client.set("s", "text")
    async with control.pipeline(transaction=True) as batch:
        batch.delete("h").hset("h", mapping={"a": "1", "b": 2}).hdel("h", "a")
        assert await batch.execute() == [0, 2, 1]
    assert await redis_client.hgetall("h") == {b"b": b"2"}
    async with control.pipeline(transaction=True) as batch:
        batch.hset("s", mapping={"x": "1"})  # a string key: the transaction's command fails
        with pytest.raises(ReplyError, match="WRONGTYPE"):
            await batch.execute()


async def test_a_script_runs_by_digest_and_is_loaded_when_redis_forgot_it(
    control: ControlRedis, redis_client: "aioredis.Redis"
) -> None:
    script = control.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert await script(keys=["n"], args=[2]) == 2
    await redis_client.script_flush()
    assert await script(keys=["n"], args=[3]) == 5


async def test_subscribers_get_confirmations_then_messages(
    control: ControlRedis, redis_client: "aioredis.Redis"
) -> None:
    async with control.pubsub() as events:
        await events.subscribe("ch")
        confirmation = await events.get_message(timeout=1.0)
        assert confirmation is not None
        assert (confirmation["type"], confirmation["channel"]) == ("subscribe", b"ch")
        assert await events.get_message(timeout=0.05) is None
        await redis_client.publish("ch", "hello")
        message = await events.get_message(timeout=2.0)
        assert message == {"type": "message", "channel": b"ch", "data": b"hello"}


async def test_a_lost_redis_is_redis_down_for_commands_and_subscribers(
    redis_server: RedisServer, control: ControlRedis
) -> None:
    async with control.pubsub() as events:
        await events.subscribe("ch")
        await events.get_message(timeout=1.0)
        waiting = asyncio.create_task(events.get_message(timeout=30.0))
        await asyncio.sleep(0.1)
        redis_server.kill()
        with pytest.raises(RedisDown):
            await asyncio.wait_for(waiting, 10)  # woken by the loss, not by the timeout
    with pytest.raises(RedisDown):
        await control.get("k")
    redis_server.start()
    assert await control.ping() is True


async def test_a_subscription_ping_keeps_messages_and_finds_a_silent_redis(redis_server: RedisServer) -> None:
    """A subscribed connection answers PING without losing a message; a Redis that stops answering
    (a master gone without a TCP reset: here SIGSTOP) fails the ping within the client's timeout."""
    control = ControlRedis(redis_server.url, timeout_s=1.0)
    publisher: aioredis.Redis = aioredis.Redis.from_url(redis_server.url)
    try:
        async with control.pubsub() as subscription:
            await subscription.subscribe("channel")
            assert (await subscription.get_message(timeout=5))["type"] == "subscribe"  # type: ignore[index]
            ping = asyncio.ensure_future(subscription.ping())
            await publisher.publish("channel", "hello")
            await ping
            message = await subscription.get_message(timeout=5)
            assert message is not None
            assert (message["type"], message["data"]) == ("message", b"hello")
            assert redis_server.process is not None
            redis_server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(RedisDown):
                    await asyncio.wait_for(subscription.ping(), 10)
            finally:
                redis_server.process.send_signal(signal.SIGCONT)
    finally:
        await publisher.aclose()
        await control.aclose()
