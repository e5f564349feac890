"""The reconcile loop with a real Redis and real worker processes (the fake worker)."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from typing import cast

import psutil
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice_manager.supervision.launchers.base import RunState
from sluice_manager.supervision.launchers.external import ExternalLauncher
from sluice_manager.supervision.reconciler import Reconciler, ReconcilerConfig
from sluice_manager.supervision.worker_state import WorkerStateStore

from tests.integration.manager.conftest import (
    FAKE_WORKER,
    REPO,
    TIMING,
    StartHarness,
    child_env,
    ready_ids,
    register,
)
from tests.integration.manager.fake_worker import starts_key
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer


async def launched_pids(redis: "aioredis.Redis") -> dict[str, int]:
    records = await WorkerStateStore(redis).launched()
    return {worker_id: int(record.handle) for worker_id, record in records.items()}


async def starts(redis: "aioredis.Redis", model: str = "m", version: str = "1.0") -> list[dict[str, object]]:
    return [json.loads(raw) for raw in await redis.lrange(starts_key(model, version), 0, -1)]


async def test_starts_min_workers_with_torch_threads(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=2)
    await start_harness(cpu_count=4)
    await eventually(lambda: _has(redis_client, 2), timeout_s=15)
    pids = await launched_pids(redis_client)
    assert set(pids) == await ready_ids(redis_client)
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    # 4 cores shared by 2 local workers.
    assert {entry["torch_threads"] for entry in await starts(redis_client)} == {2}
    await asyncio.sleep(0.5)
    assert len(await starts(redis_client)) == 2, "no extra workers"


async def test_killed_worker_is_cleaned_up_at_once_and_replaced(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    # A long heartbeat TTL: the record must go because the launcher saw the exit, not because it expired.
    await register(redis_client, min_workers=2, fake={"ttl_s": 30})
    await start_harness()
    await eventually(lambda: _has(redis_client, 2), timeout_s=15)
    victim, pid = sorted((await launched_pids(redis_client)).items())[0]
    os.kill(pid, signal.SIGKILL)

    async def cleaned() -> bool:
        gone = not await redis_client.hexists(keys.workers("m", "1.0"), victim)
        return gone and not await redis_client.exists(keys.heartbeat("m", "1.0", victim))

    await eventually(cleaned, timeout_s=2)
    await eventually(lambda: _has(redis_client, 2), timeout_s=15)
    assert victim not in await ready_ids(redis_client)
    assert len(await launched_pids(redis_client)) == 2
    # The restart streak is cleared once the replacement is READY.
    await eventually(lambda: _no_streak(redis_client), timeout_s=5)


async def test_hung_worker_is_killed_and_replaced(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=1, fake={"ttl_s": 0.6})
    await start_harness()
    await eventually(lambda: _has(redis_client, 1), timeout_s=15)
    [(hung, pid)] = (await launched_pids(redis_client)).items()
    os.kill(pid, signal.SIGSTOP)
    # Heartbeat TTL (0.6 s) + grace (0.5 s), then SIGKILL (which works on a stopped process).
    await eventually(lambda: not _alive(pid), timeout_s=10)
    await eventually(lambda: _has(redis_client, 1), timeout_s=15)
    assert hung not in await ready_ids(redis_client)


async def test_worker_that_never_gets_ready_is_killed_after_its_startup_timeout(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=1, fake={"load_s": 60}, startup_timeout_s=1)
    await start_harness()
    await eventually(lambda: _count_starts(redis_client, 2), timeout_s=15)
    first = (await starts(redis_client))[0]
    assert not _alive(int(str(first["pid"])))


async def test_failed_loads_back_off(redis_client: "aioredis.Redis", start_harness: StartHarness) -> None:
    await register(redis_client, min_workers=1, fake={"exit_code": 3})
    await start_harness()
    # Backoff 0, 1, 1, 2 s: four starts take at least 2 s, and within 3.5 s there are at most five.
    await eventually(lambda: _count_starts(redis_client, 4), timeout_s=15)
    await asyncio.sleep(1.0)
    assert len(await starts(redis_client)) <= 5
    streak = json.loads(cast(bytes, await redis_client.hget(keys.RESTARTS, "m:1.0")))
    assert streak["failures"] >= 3


async def test_scale_down_stops_the_newest_gracefully(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=3)
    await start_harness()
    await eventually(lambda: _has(redis_client, 3), timeout_s=15)
    pids = await launched_pids(redis_client)
    newest = max(pids, key=int)
    await register(redis_client, min_workers=2)
    await eventually(lambda: _has(redis_client, 2), timeout_s=10)
    await eventually(lambda: not _alive(pids[newest]), timeout_s=10)
    await eventually(lambda: _launched_count(redis_client, 2), timeout_s=5)
    assert newest not in await launched_pids(redis_client)
    assert await redis_client.hget(keys.RESTARTS, "m:1.0") is None, "a requested stop is not a failure"


async def test_unregistered_version_loses_its_workers(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=2)
    await register(redis_client, "other", min_workers=1)
    await start_harness()
    await eventually(lambda: _has(redis_client, 2), timeout_s=15)
    await eventually(lambda: _has(redis_client, 1, "other"), timeout_s=15)
    launched = await WorkerStateStore(redis_client).launched()
    pids = [int(record.handle) for record in launched.values() if record.model_name == "m"]
    await redis_client.delete(keys.version_config("m", "1.0"))
    await redis_client.hdel(keys.model("m"), "v:1.0")
    await eventually(lambda: all(not _alive(pid) for pid in pids), timeout_s=10)
    await eventually(lambda: _launched_count(redis_client, 1), timeout_s=10)
    assert await ready_ids(redis_client, "other") == set(await launched_pids(redis_client))


async def test_restarted_manager_adopts_without_duplicates(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=2)
    first = await start_harness()
    await eventually(lambda: _has(redis_client, 2), timeout_s=15)
    before = await launched_pids(redis_client)
    await first.halt()  # the manager dies; its workers keep running
    second = await start_harness(adopt=True)
    assert await second.running() == set(before)
    await asyncio.sleep(1.0)
    assert await launched_pids(redis_client) == before
    assert len(await starts(redis_client)) == 2, "no duplicate workers"
    # The new manager watches the adopted processes: an exit is noticed and replaced.
    victim = sorted(before)[0]
    os.kill(before[victim], signal.SIGKILL)
    await eventually(lambda: _gone_and_replaced(redis_client, victim), timeout_s=15)


async def test_worker_that_died_while_no_manager_ran_is_cleaned_up(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=1, fake={"ttl_s": 30})
    first = await start_harness()
    await eventually(lambda: _has(redis_client, 1), timeout_s=15)
    [(dead, pid)] = (await launched_pids(redis_client)).items()
    await first.halt()
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: not _alive(pid), timeout_s=5)
    await start_harness(adopt=True)
    assert not await redis_client.hexists(keys.workers("m", "1.0"), dead)
    await eventually(lambda: _has(redis_client, 1), timeout_s=15)
    assert dead not in await launched_pids(redis_client)


async def test_shutdown_stops_every_worker(
    redis_client: "aioredis.Redis", start_harness: StartHarness
) -> None:
    await register(redis_client, min_workers=2)
    harness = await start_harness()
    await eventually(lambda: _has(redis_client, 2), timeout_s=15)
    pids = await launched_pids(redis_client)
    harness.stop.set()
    await harness.task
    await harness.reconciler.shutdown(5.0)
    assert all(not _alive(pid) for pid in pids.values())
    await eventually(lambda: _launched_count(redis_client, 0), timeout_s=5)
    assert await redis_client.hlen(keys.workers("m", "1.0")) == 0
    assert all(state is not RunState.RUNNING for state in (await harness.launcher.states()).values())


async def test_external_launcher_counts_and_cleans_up(
    redis_server: RedisServer, redis_client: "aioredis.Redis"
) -> None:
    await register(redis_client, min_workers=1, fake={"ttl_s": 0.6})
    reconciler = Reconciler(
        WorkerStateStore(redis_client),
        ExternalLauncher(socket.gethostname()),
        ReconcilerConfig(timing=TIMING, reconcile_interval_s=0.1),
    )
    worker = start_external_worker(redis_server.url, "w1")
    try:
        await eventually(lambda: _has(redis_client, 1), timeout_s=15)
        await reconciler.reconcile_once()
        assert await redis_client.hexists(keys.workers("m", "1.0"), "w1")
        assert await launched_pids(redis_client) == {}
        worker.kill()
        worker.wait()

        async def cleaned() -> bool:
            await reconciler.reconcile_once()
            return not await redis_client.hexists(keys.workers("m", "1.0"), "w1")

        await eventually(cleaned, timeout_s=10, interval_s=0.1)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def start_external_worker(redis_url: str, worker_id: str) -> "subprocess.Popen[bytes]":
    """A worker someone else started (compose): the manager's launcher knows nothing of it."""
    argv = [sys.executable, "-m", FAKE_WORKER, "--model-name", "m", "--model-version", "1.0"]
    return subprocess.Popen([*argv, "--worker-id", worker_id], env=child_env(redis_url), cwd=REPO)


# --- helpers --------------------------------------------------------------------------------------


async def _has(redis: "aioredis.Redis", count: int, model: str = "m") -> bool:
    return len(await ready_ids(redis, model)) == count


async def _count_starts(redis: "aioredis.Redis", count: int) -> bool:
    return len(await starts(redis)) >= count


async def _launched_count(redis: "aioredis.Redis", count: int) -> bool:
    return len(await launched_pids(redis)) == count


async def _no_streak(redis: "aioredis.Redis") -> bool:
    return await redis.hget(keys.RESTARTS, "m:1.0") is None


async def _gone_and_replaced(redis: "aioredis.Redis", victim: str) -> bool:
    ready = await ready_ids(redis)
    return victim not in ready and len(ready) == 2


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
