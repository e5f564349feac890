"""``sluice_redis_wait_replicas``: the gateway's enqueue is followed by WAIT on its own connection, so
an admitted job is on the replicas when its call goes on; concurrent enqueues share WAITs; replicas
that do not answer delay admission by the timeout, never refuse it. Real redis-server processes: a
master and two replicas."""

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.redis.pipelined import PipelinedRedis
from sluice_gateway.broker.redis_admission import RedisJobAdmission
from sluice_gateway.broker.replica_wait import ReplicaWait
from sluice_gateway.broker.seam import Admission

from tests.integration.gateway.conftest import register
from tests.support.redis_server import RedisServer

MODEL, VERSION = "echo", "1.0"
STREAM = keys.job_stream(MODEL, VERSION)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[RedisServer]]:
    master = RedisServer(tmp_path / "master", appendonly=False)
    master.start()
    replicas = [
        RedisServer(
            tmp_path / f"replica-{i}",
            appendonly=False,
            extra_args=["--replicaof", "127.0.0.1", str(master.port)],
        )
        for i in range(2)
    ]
    for replica in replicas:
        replica.start()
    try:
        client = redis.Redis(port=master.port)
        assert client.wait(2, 10_000) == 2  # both replicas connected
        yield [master, *replicas]
    finally:
        for server in (*replicas, master):
            if server.process is not None:
                server.kill()


@pytest.fixture
async def master(servers: list[RedisServer]) -> AsyncIterator["aioredis.Redis"]:
    client: aioredis.Redis = aioredis.Redis(port=servers[0].port)
    await register(client)
    await client.xgroup_create(STREAM, keys.JOB_GROUP, id="0", mkstream=True)
    await client.hset(keys.workers(MODEL, VERSION), "w1", "{}")
    try:
        yield client
    finally:
        await client.aclose()


async def waits_sent(master: "aioredis.Redis") -> int:
    stats = await master.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def resume_all(replicas: list[RedisServer]) -> None:
    for replica in replicas:
        if replica.process is not None:
            replica.process.send_signal(signal.SIGCONT)


async def admission(
    servers: list[RedisServer], wait: ReplicaWait
) -> tuple[RedisJobAdmission, PipelinedRedis]:
    link = PipelinedRedis(servers[0].url, timeout_s=10.0)
    return RedisJobAdmission(link, wait), link


async def test_an_admitted_job_is_on_the_replicas_when_its_call_goes_on(
    servers: list[RedisServer], master: "aioredis.Redis"
) -> None:
    queue, link = await admission(servers, ReplicaWait(2, 5000))
    before = await waits_sent(master)
    try:
        for replica in servers[1:]:
            # A replica that applies what it receives only after a pause: without WAIT the job would
            # not be there yet when enqueue returns.
            assert replica.process is not None
            replica.process.send_signal(signal.SIGSTOP)
        resume = asyncio.get_running_loop().call_later(0.3, resume_all, servers[1:])
        assert await queue.enqueue(MODEL, VERSION, b"job") is Admission.ADMITTED
        resume.cancel()
        for replica in servers[1:]:
            assert redis.Redis(port=replica.port).xlen(STREAM) == 1
        assert await waits_sent(master) - before == 1
    finally:
        await link.close()


async def test_concurrent_enqueues_share_waits(servers: list[RedisServer], master: "aioredis.Redis") -> None:
    queue, link = await admission(servers, ReplicaWait(2, 5000))
    before = await waits_sent(master)
    try:
        outcomes = await asyncio.gather(*(queue.enqueue(MODEL, VERSION, b"job %d" % i) for i in range(50)))
        assert set(outcomes) == {Admission.ADMITTED}
        assert 1 <= await waits_sent(master) - before < 50
        for replica in servers[1:]:
            assert redis.Redis(port=replica.port).xlen(STREAM) == 50
    finally:
        await link.close()


async def test_replicas_that_do_not_answer_delay_admission_but_never_refuse_it(
    servers: list[RedisServer], master: "aioredis.Redis"
) -> None:
    queue, link = await admission(servers, ReplicaWait(2, 200))
    stopped = servers[2]
    assert stopped.process is not None
    stopped.process.send_signal(signal.SIGSTOP)
    try:
        outcomes = await asyncio.gather(*(queue.enqueue(MODEL, VERSION, b"job %d" % i) for i in range(5)))
        assert set(outcomes) == {Admission.ADMITTED}
        assert await master.xlen(STREAM) == 5
    finally:
        stopped.process.send_signal(signal.SIGCONT)
        await link.close()


async def test_without_the_setting_no_wait_is_sent(
    servers: list[RedisServer], master: "aioredis.Redis"
) -> None:
    queue, link = await admission(servers, ReplicaWait())
    before = await waits_sent(master)
    try:
        assert await queue.enqueue(MODEL, VERSION, b"job") is Admission.ADMITTED
        assert await queue.enqueue("absent", VERSION, b"job") is Admission.VERSION_GONE
        assert await waits_sent(master) == before
    finally:
        await link.close()
