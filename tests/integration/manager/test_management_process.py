"""The management API of a real manager process (its Celery task worker included) through crashes
(reliability_security.md T-17, T-18): a manager killed with -9 mid-registration leaves no half state
and the registration completes after the restart; a manager killed in steady state comes back with
its models, versions, default and workers intact, neither duplicated nor orphaned."""

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import psutil
import pytest
import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry import reader as registry

from tests.integration.manager.conftest import FAKE_WORKER
from tests.support.eventually import eventually
from tests.support.management_stack import Manager, http, start_manager
from tests.support.models import echo_model, write_mar
from tests.support.redis_server import RedisServer

FAST = "fake:\n  ttl_s: 1.0\n"


@pytest.fixture
def managers(redis_server: RedisServer, tmp_path: Path) -> Iterator[list[Manager]]:
    write_mar(echo_model("echo", config=FAST), tmp_path / "store")
    write_mar(echo_model("other", config=FAST), tmp_path / "store")
    started: list[Manager] = []
    yield started
    for manager in started:
        manager.service.stop()
    for process in psutil.process_iter(["cmdline"]):  # fake workers of this test's Redis
        try:
            if FAKE_WORKER in " ".join(process.info["cmdline"] or []) and (
                process.environ().get("SLUICE_REDIS_URL") == redis_server.url
            ):
                process.kill()
        except psutil.Error:
            continue


def launch(redis_server: RedisServer, tmp_path: Path, managers: list[Manager], **settings: str) -> Manager:
    manager = start_manager(
        redis_server.url, tmp_path, grpc_port=0, rest_port=0, worker_module=FAKE_WORKER,
        log_name=f"manager-{len(managers)}.log", **settings,
    )  # fmt: skip
    managers.append(manager)
    return manager


def kill_9(manager: Manager) -> None:
    children = psutil.Process(manager.service.process.pid).children(recursive=True)
    task_workers = [c for c in children if "sluice_manager.operations.task_worker" in " ".join(c.cmdline())]
    assert task_workers
    manager.service.process.kill()
    manager.service.process.wait()
    _, alive = psutil.wait_procs(task_workers, timeout=10)
    assert not alive, "the task worker dies with its manager"


async def post(url: str) -> tuple[int, dict[str, object]]:
    answer = await asyncio.to_thread(http, "POST", url)
    return answer.status, answer.json()


def model_dirs(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "home" / "models").iterdir())


async def test_kill_9_mid_registration_leaves_no_half_state_and_completes_after_restart(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, managers: list[Manager]
) -> None:
    first = launch(redis_server, tmp_path, managers, debug_pause_before_commit_s="60")
    call = asyncio.ensure_future(post(f"{first.rest_url}/models?url=echo.mar&initial_workers=1"))

    async def unpacked() -> bool:
        ops = [json.loads(raw) for raw in await _ops(redis_client)]
        return any(op.get("model_dir") and op.get("version") for op in ops)

    await eventually(unpacked, timeout_s=30)
    kill_9(first)
    with pytest.raises(OSError, match=r"closed connection|reset|refused"):  # the call died with it
        await call
    # Half state is impossible: the version record is written last, and was not.
    assert await registry.model_versions(redis_client, "echo") == (None, set())
    assert await redis_client.scard(keys.OPEN_OPERATIONS) == 1

    second = launch(redis_server, tmp_path, managers)

    async def registered() -> bool:
        return await registry.get_version(redis_client, "echo", "1.0") is not None

    # The orphaned operation is resubmitted and completes: the model is fully there.
    await eventually(registered, timeout_s=30)
    await eventually(lambda: _no_open_ops(redis_client), timeout_s=10)
    record = await registry.get_version(redis_client, "echo", "1.0")
    assert record is not None
    assert model_dirs(tmp_path) == [Path(record.model_dir).name], "no staging folder, no orphan folder"
    await eventually(lambda: _ready(redis_client, "echo", 1), timeout_s=20)
    status, body = await post(f"{second.rest_url}/models?url=echo.mar")
    assert (status, body["message"]) == (409, "Model version 1.0 is already registered for model echo")


async def test_kill_9_in_steady_state_keeps_everything(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, managers: list[Manager]
) -> None:
    first = launch(redis_server, tmp_path, managers)
    assert (await post(f"{first.rest_url}/models?url=echo.mar&initial_workers=2"))[0] == 200
    assert (await post(f"{first.rest_url}/models?url=other.mar"))[0] == 200
    before = await _launched(redis_client)
    assert len(before) == 2
    kill_9(first)
    assert all(psutil.pid_exists(pid) for pid in before.values()), "workers outlive their manager"
    victim = sorted(before)[0]
    os.kill(before[victim], signal.SIGKILL)

    second = launch(redis_server, tmp_path, managers)
    await eventually(lambda: _ready(redis_client, "echo", 2), timeout_s=20)
    await asyncio.sleep(1.0)
    after = await _launched(redis_client)
    assert len(after) == 2, "no duplicate worker"
    survivor = sorted(before)[1]
    assert after[survivor] == before[survivor], "the survivor was adopted"
    listing = (await asyncio.to_thread(http, "GET", f"{second.rest_url}/models")).json()
    assert [m["modelName"] for m in listing["models"]] == ["echo", "other"]
    [entry] = (await asyncio.to_thread(http, "GET", f"{second.rest_url}/models/echo")).json()
    assert [w["status"] for w in entry["workers"]] == ["READY", "READY"]
    assert len(model_dirs(tmp_path)) == 2


async def test_a_killed_task_worker_is_replaced_and_operations_go_on(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, managers: list[Manager]
) -> None:
    manager = launch(redis_server, tmp_path, managers)
    [task_worker] = [
        child
        for child in psutil.Process(manager.service.process.pid).children()
        if "sluice_manager.operations.task_worker" in " ".join(child.cmdline())
    ]
    for process in [task_worker, *task_worker.children(recursive=True)]:
        process.kill()
    status, body = await post(f"{manager.rest_url}/models?url=echo.mar")
    assert status == 200, body
    assert (await asyncio.to_thread(http, "DELETE", f"{manager.rest_url}/models/echo")).status == 200


async def _ops(redis: "aioredis.Redis") -> list[bytes]:
    found = [key async for key in redis.scan_iter(match="sluice:manager:op:*")]
    return [
        raw
        for key in found
        if not key.endswith(b":lease") and (raw := cast(bytes | None, await redis.get(key)))
    ]


async def _no_open_ops(redis: "aioredis.Redis") -> bool:
    return not await redis.scard(keys.OPEN_OPERATIONS)


async def _ready(redis: "aioredis.Redis", model: str, count: int) -> bool:
    return len(await registry.live_workers(redis, model, "1.0")) == count


async def _launched(redis: "aioredis.Redis") -> dict[str, int]:
    raw = cast(dict[bytes, bytes], await redis.hgetall(keys.LAUNCHED_WORKERS))
    return {k.decode(): int(json.loads(v)["handle"]) for k, v in raw.items()}
