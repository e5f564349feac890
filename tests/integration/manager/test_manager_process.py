"""``python -m sluice_manager`` as a real process: startup models, kill -9 and restart (no duplicate,
no orphan workers), two managers on one Redis, graceful SIGTERM (reliability_security.md T-17)."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

import psutil
import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry.records import StartupReport
from sluice_manager.supervision.worker_state import WorkerStateStore

from tests.integration.manager.conftest import FAKE_WORKER, REPO, child_env, ready_ids
from tests.integration.manager.fake_worker import starts_key
from tests.support.eventually import eventually
from tests.support.models import ModelSpec, echo_model, write_mar
from tests.support.redis_server import RedisServer, free_port

MODEL_CONFIG = "minWorkers: 2\nmaxWorkers: 2\nfake:\n  ttl_s: 1.0\n"


def manager_env(redis_url: str, tmp_path: Path, load_models: str) -> dict[str, str]:
    env = child_env(redis_url)
    for name in ("TS_CONFIG_FILE", "SLUICE_TS_CONFIG"):
        env.pop(name, None)
    env.update(
        SLUICE_HOME=str(tmp_path / "home"),
        SLUICE_MODEL_STORE=str(tmp_path / "store"),
        SLUICE_LOAD_MODELS=load_models,
        SLUICE_WORKER_MODULE=FAKE_WORKER,
        SLUICE_RECONCILE_INTERVAL_S="0.2",
        SLUICE_HEARTBEAT_GRACE_S="0.5",
        SLUICE_WORKER_STOP_TIMEOUT_S="5",
        SLUICE_LOG_LEVEL="info",
        # Token authorization is on by default: the key file goes to the test's folder, not the cwd.
        SLUICE_KEY_FILE=str(tmp_path / "key_file.json"),
        # The management API on free ports (each manager of a test gets its own).
        SLUICE_GRPC_MANAGEMENT_PORT=str(free_port()),
        SLUICE_MANAGEMENT_ADDRESS=f"http://127.0.0.1:{free_port()}",
    )
    return env


def run_manager(env: dict[str, str], stdout: int) -> "subprocess.Popen[bytes]":
    return subprocess.Popen(
        [sys.executable, "-m", "sluice_manager"], env=env, cwd=REPO, stdout=stdout, stderr=subprocess.STDOUT
    )


@pytest.fixture
async def spawn_manager(
    redis_server: RedisServer, tmp_path: Path
) -> AsyncIterator[Callable[[str], "subprocess.Popen[bytes]"]]:
    write_mar(echo_model("echo", config=MODEL_CONFIG), tmp_path / "store")
    started: list[subprocess.Popen[bytes]] = []

    def spawn(load_models: str = "echo.mar") -> "subprocess.Popen[bytes]":
        with open(tmp_path / f"manager-{len(started)}.log", "ab") as log:
            process = run_manager(manager_env(redis_server.url, tmp_path, load_models), log.fileno())
        started.append(process)
        return process

    yield spawn
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    _kill_fake_workers(redis_server.url)


def _kill_fake_workers(redis_url: str) -> None:
    """Fake workers of this test's Redis only (other tests may run at the same time)."""
    for process in psutil.process_iter(["cmdline"]):
        try:
            if FAKE_WORKER in " ".join(process.info["cmdline"] or []) and (
                process.environ().get("SLUICE_REDIS_URL") == redis_url
            ):
                process.kill()
        except psutil.Error:
            continue


async def report_of(redis: "aioredis.Redis", pid: int) -> StartupReport | None:
    raw = await redis.get(keys.STARTUP_REPORT)
    report = None if raw is None else StartupReport.from_json(raw)
    return report if report is not None and report.manager_pid == pid and report.done else None


async def launched(redis: "aioredis.Redis") -> dict[str, int]:
    return {w: int(r.handle) for w, r in (await WorkerStateStore(redis).launched()).items()}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def wait_exit(process: "subprocess.Popen[bytes]", timeout_s: float) -> int:
    return await asyncio.to_thread(process.wait, timeout_s)


async def two_ready(redis: "aioredis.Redis") -> bool:
    return len(await ready_ids(redis, "echo", "1.0")) == 2


async def test_kill_9_and_restart_neither_duplicates_nor_orphans(
    redis_client: "aioredis.Redis", spawn_manager: Callable[..., "subprocess.Popen[bytes]"], tmp_path: Path
) -> None:
    first = spawn_manager()
    await eventually(lambda: report_of(redis_client, first.pid), timeout_s=20)
    report = await report_of(redis_client, first.pid)
    assert report is not None
    assert [(m.model_name, m.version, m.min_workers) for m in report.models] == [("echo", "1.0", 2)]
    await eventually(lambda: two_ready(redis_client), timeout_s=20)
    before = await launched(redis_client)
    assert len(before) == 2

    first.kill()
    first.wait()
    assert all(alive(pid) for pid in before.values()), "workers outlive their manager"
    survivor, victim = sorted(before)
    os.kill(before[victim], signal.SIGKILL)

    second = spawn_manager()
    await eventually(lambda: report_of(redis_client, second.pid), timeout_s=20)
    await eventually(lambda: two_ready(redis_client), timeout_s=20)
    await asyncio.sleep(1.0)
    after = await launched(redis_client)
    assert len(after) == 2
    assert after[survivor] == before[survivor], "the surviving worker was adopted, not replaced"
    assert victim not in after
    assert await ready_ids(redis_client, "echo", "1.0") == set(after)
    assert len(await redis_client.lrange(starts_key("echo", "1.0"), 0, -1)) == 3
    # The startup model was adopted as registered: one unpacked folder, still the one in use.
    assert len(list((tmp_path / "home" / "models").iterdir())) == 1

    second.send_signal(signal.SIGTERM)
    assert await wait_exit(second, 20) == 0
    assert not any(alive(pid) for pid in after.values())
    assert await launched(redis_client) == {}
    assert await redis_client.hlen(keys.workers("echo", "1.0")) == 0
    assert await redis_client.get(keys.MANAGER_LEASE) is None


async def test_a_second_manager_waits_for_the_lease(
    redis_client: "aioredis.Redis", spawn_manager: Callable[..., "subprocess.Popen[bytes]"]
) -> None:
    first = spawn_manager()
    await eventually(lambda: two_ready(redis_client), timeout_s=20)
    second = spawn_manager()
    await asyncio.sleep(2.0)
    assert second.poll() is None
    assert len(await launched(redis_client)) == 2, "only the lease holder starts workers"
    lease = json.loads(cast(bytes, await redis_client.get(keys.MANAGER_LEASE)))
    assert lease["pid"] == first.pid
    first.send_signal(signal.SIGTERM)
    assert await wait_exit(first, 20) == 0
    # The lease was released: the second manager takes over and brings the workers back.
    await eventually(lambda: report_of(redis_client, second.pid), timeout_s=20)
    await eventually(lambda: two_ready(redis_client), timeout_s=20)
    assert {r.host for r in (await WorkerStateStore(redis_client).launched()).values()}


async def test_a_broken_startup_archive_is_reported_and_the_rest_loads(
    redis_client: "aioredis.Redis", spawn_manager: Callable[..., "subprocess.Popen[bytes]"], tmp_path: Path
) -> None:
    bad = ModelSpec(name="bad", handler="../../evil.py", files={"x.py": ""})
    write_mar(bad, tmp_path / "store")
    manager = spawn_manager("echo.mar,bad.mar,missing.mar")
    await eventually(lambda: report_of(redis_client, manager.pid), timeout_s=20)
    report = await report_of(redis_client, manager.pid)
    assert report is not None
    assert [m.model_name for m in report.models] == ["echo"]
    assert len(report.errors) == 2
    assert report.errors[0].startswith("bad.mar: Invalid model archive bad.mar: handler")
    assert report.errors[1] == "missing.mar: Model not found at: missing.mar"
    assert str(tmp_path) not in " ".join(report.errors)
    assert manager.poll() is None
    await eventually(lambda: two_ready(redis_client), timeout_s=20)


async def test_manager_waits_for_redis_and_stops_cleanly_meanwhile(tmp_path: Path) -> None:
    write_mar(echo_model("echo", config=MODEL_CONFIG), tmp_path / "store")
    late = RedisServer(tmp_path / "late-redis")
    process = run_manager(manager_env(late.url, tmp_path, "echo.mar"), subprocess.DEVNULL)
    try:
        await asyncio.sleep(1.5)
        assert process.poll() is None, "the manager waits for Redis instead of exiting"
        late.start()
        client = aioredis.Redis.from_url(late.url)
        try:
            await eventually(lambda: report_of(client, process.pid), timeout_s=20)
            await eventually(lambda: two_ready(client), timeout_s=20)
        finally:
            await client.aclose()
        process.send_signal(signal.SIGTERM)
        assert await wait_exit(process, 20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        _kill_fake_workers(late.url)
        if late.process is not None:
            late.kill()
