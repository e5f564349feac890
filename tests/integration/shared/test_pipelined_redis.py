"""The hot path's pipelined Redis client against a real redis-server: order, errors, scripts,
timeouts, outages and reconnection."""

import asyncio
import hashlib
import time

import pytest
import redis.asyncio as aioredis
import uvloop
from sluice.redis.endpoint import Endpoint
from sluice.redis.errors import RedisDown, ReplyError
from sluice.redis.pipelined import PipelinedRedis

from tests.support.redis_server import RedisServer, free_port, redis_with_socket


async def test_commands_sent_together_are_answered_in_order(pipelined_redis: PipelinedRedis) -> None:
    sent = [pipelined_redis.send("INCR", "counter") for _ in range(300)]
    assert await asyncio.gather(*sent) == list(range(1, 301))
    assert await pipelined_redis.execute("GET", "counter") == b"300"


async def test_binary_values_round_trip(pipelined_redis: PipelinedRedis) -> None:
    value = bytes(range(256)) * 1000
    await pipelined_redis.execute("SET", "blob", value)
    assert await pipelined_redis.execute("GET", "blob") == value
    assert await pipelined_redis.execute("GET", "missing") is None


async def test_large_values_among_small_commands_keep_their_order(pipelined_redis: PipelinedRedis) -> None:
    # Values of 64 KiB and more in a payload command are written as buffers of their own, beside the
    # joined small commands; other commands are packed whole. Both kinds are mixed here.
    values = [bytes([n]) * (64 * 1024 + n * 1000) for n in range(4)]
    sent = []
    for n, value in enumerate(values):
        sent += [
            pipelined_redis.send("INCR", "n"),
            pipelined_redis.send("SET", f"v{n}", value, "EX", 60, payload=n % 2 == 0),
        ]
    await asyncio.gather(*sent)
    got = await asyncio.gather(*(pipelined_redis.send("GET", f"v{n}") for n in range(4)))
    assert got == values
    assert await pipelined_redis.execute("GET", "n") == b"4"


async def test_an_error_reply_fails_its_command_only(pipelined_redis: PipelinedRedis) -> None:
    await pipelined_redis.execute("SET", "text", "x")
    failing = pipelined_redis.send("INCR", "text")
    after = pipelined_redis.send("INCR", "number")
    with pytest.raises(ReplyError, match="not an integer"):
        await failing
    assert await after == 1


async def test_evalsha_loads_a_script_redis_does_not_know(pipelined_redis: PipelinedRedis) -> None:
    script = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
    sha = hashlib.sha1(script.encode()).hexdigest()
    assert await pipelined_redis.evalsha(sha, script, ["k"], [5]) == 5  # NOSCRIPT, then EVAL
    assert await pipelined_redis.evalsha(sha, script, ["k"], [5]) == 10  # cached now
    await pipelined_redis.execute("SCRIPT", "FLUSH")
    assert await pipelined_redis.evalsha(sha, script, ["k"], [1]) == 11


async def test_the_database_of_the_url_is_selected(redis_server: RedisServer) -> None:
    pipelined = PipelinedRedis(redis_server.url.rsplit("/", 1)[0] + "/3")
    check: aioredis.Redis = aioredis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/3")
    try:
        await pipelined.execute("SET", "where", "db3")
        assert await check.get("where") == b"db3"
    finally:
        await pipelined.close()
        await check.aclose()


async def test_a_reply_overdue_fails_with_timeout_and_the_client_recovers(
    pipelined_redis: PipelinedRedis,
) -> None:
    blocked = pipelined_redis.send("XREAD", "BLOCK", 3000, "STREAMS", "nothing", "$", timeout_s=0.3)
    queued_behind = pipelined_redis.send("PING")
    with pytest.raises(RedisDown):
        await blocked
    with pytest.raises(RedisDown):
        await queued_behind
    assert await pipelined_redis.execute("PING") == b"PONG"


async def test_a_cancelled_caller_does_not_shift_the_replies(pipelined_redis: PipelinedRedis) -> None:
    waiting = asyncio.ensure_future(pipelined_redis.execute("XREAD", "BLOCK", 200, "STREAMS", "nothing", "$"))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await pipelined_redis.execute("ECHO", "mine") == b"mine"


async def test_redis_going_away_fails_commands_in_flight_then_reconnects(
    redis_server: RedisServer, pipelined_redis: PipelinedRedis
) -> None:
    await pipelined_redis.execute("SET", "before", "1")
    blocked = pipelined_redis.send("XREAD", "BLOCK", 5000, "STREAMS", "nothing", "$")
    await asyncio.sleep(0.1)
    redis_server.kill()
    with pytest.raises(RedisDown):
        await blocked
    with pytest.raises(RedisDown):  # nobody listens: refused at once, no hang
        await pipelined_redis.execute("PING")
    redis_server.start()
    assert await pipelined_redis.execute("GET", "before") == b"1"  # AOF kept it; a new connection read it


async def test_an_unreachable_redis_is_a_connection_error() -> None:
    pipelined = PipelinedRedis(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(RedisDown, match="cannot connect"):
            await pipelined.execute("PING")
    finally:
        await pipelined.close()


async def test_a_closed_client_refuses_commands(pipelined_redis: PipelinedRedis) -> None:
    assert await pipelined_redis.execute("PING") == b"PONG"
    await pipelined_redis.close()
    with pytest.raises(RedisDown, match="closed"):
        await pipelined_redis.execute("PING")


async def test_the_credentials_of_the_url_are_used(
    redis_server: RedisServer, redis_client: "aioredis.Redis"
) -> None:
    await redis_client.config_set("requirepass", "s3cret")
    good = PipelinedRedis(f"redis://:s3cret@127.0.0.1:{redis_server.port}/0")
    wrong = PipelinedRedis(f"redis://:wrong@127.0.0.1:{redis_server.port}/0")
    try:
        assert await good.execute("PING") == b"PONG"
        with pytest.raises(RedisDown, match="refused"):
            await wrong.execute("PING")
    finally:
        await good.close()
        await wrong.close()


async def test_a_unix_socket_url_reaches_its_database() -> None:
    with redis_with_socket() as server:
        pipelined = PipelinedRedis(server.unix_url(db=3), timeout_s=2.0)
        try:
            assert await pipelined.execute("SET", "k", "v") == b"OK"
            assert b"redis.sock" in await pipelined.execute("CLIENT", "INFO")  # not the TCP port
        finally:
            await pipelined.close()
        direct = aioredis.Redis(port=server.port, db=3)
        try:
            assert await direct.get("k") == b"v"
        finally:
            await direct.aclose()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6380/2", Endpoint(port=6380, db=2)),
        ("redis://r", Endpoint(host="r")),
        ("rediss://:p%40ss@r:1", Endpoint(host="r", port=1, password="p@ss", tls=True)),
        ("redis://u:pw@r/0", Endpoint(host="r", username="u", password="pw")),
        ("unix://:pw@/run/redis.sock?db=4", Endpoint(path="/run/redis.sock", db=4, password="pw")),
        ("redis://r:6379?db=5", Endpoint(host="r", db=5)),
    ],
)
def test_redis_urls_are_read_as_redis_py_reads_them(url: str, expected: Endpoint) -> None:
    assert Endpoint.from_url(url) == expected


@pytest.mark.parametrize("url", ["http://r:6379", "redis://r:port", "redis://r/zero"])
def test_a_url_that_is_not_redis_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="Redis URL"):
        Endpoint.from_url(url)


def test_a_reply_that_came_while_the_loop_was_stalled_is_not_overdue(redis_server: RedisServer) -> None:
    # A worker's handler runs inline on the loop's thread: the read ahead sent before the call is
    # answered at once, but the loop reads the answer only after the call, maybe past the command's
    # timeout. The answer must win over the overdue deadline check: both loops read sockets before
    # they run due timers (uvloop since libuv 1.45), which the inline worker relies on.
    async def stalled_read() -> object:
        client = PipelinedRedis(redis_server.url, timeout_s=0.3)
        try:
            assert await client.execute("PING") == b"PONG"
            answer = client.send("ECHO", b"kept")
            await asyncio.sleep(0)  # the command leaves in this turn's write
            time.sleep(0.8)  # noqa: ASYNC251 (the stall is the point: the answer waits in the socket)
            return await answer
        finally:
            await client.close()

    assert uvloop.run(stalled_read()) == b"kept"
