"""Manager integration fixtures: a real Redis, real worker processes (the fake worker, or the real
``sluice_worker`` where a test says so), the real launcher and reconcile loop."""

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore
from sluice_manager.supervision.launchers.base import Launcher, RunState
from sluice_manager.supervision.launchers.process import ProcessLauncher, find_process, worker_command
from sluice_manager.supervision.policy import Timing
from sluice_manager.supervision.reconciler import Reconciler, ReconcilerConfig
from sluice_manager.supervision.worker_state import WorkerStateStore

from tests.support.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[3]
FAKE_WORKER = "tests.integration.manager.fake_worker"
TIMING = Timing(heartbeat_grace_s=0.5, stop_timeout_s=5.0)


def child_env(redis_url: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env["SLUICE_REDIS_URL"] = redis_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


async def register(
    redis: "aioredis.Redis",
    model: str = "m",
    version: str = "1.0",
    *,
    min_workers: int = 1,
    max_workers: int | None = None,
    fake: dict[str, Any] | None = None,
    startup_timeout_s: int = 30,
    model_dir: str = "/nonexistent",
    handler: str = "handler.py",
) -> VersionRecord:
    record = VersionRecord(
        model_name=model,
        version=version,
        model_url=f"{model}.mar",
        model_dir=model_dir,
        handler=handler,
        min_workers=min_workers,
        max_workers=min_workers if max_workers is None else max_workers,
        startup_timeout_s=startup_timeout_s,
        model_yaml_config={"fake": fake or {}},
    )
    await RegistryStore(redis).add(record, make_default=False)
    return record


async def ready_ids(redis: "aioredis.Redis", model: str = "m", version: str = "1.0") -> set[str]:
    return {worker.worker_id for worker in await registry.live_workers(redis, model, version)}


@dataclass
class Harness:
    redis: "aioredis.Redis"
    launcher: ProcessLauncher
    reconciler: Reconciler
    stop: asyncio.Event
    task: "asyncio.Task[None]"
    exits: "asyncio.Task[None]"

    halted: bool = False

    async def halt(self) -> None:
        """Stop the reconcile loop but leave the workers running (a manager that died)."""
        self.halted = True
        self.stop.set()
        await self.task
        self.exits.cancel()
        await self.launcher.aclose()

    async def kill_leftovers(self) -> None:
        for record in (await WorkerStateStore(self.redis).launched()).values():
            if find_process(record) is not None:
                os.kill(int(record.handle), signal.SIGKILL)

    async def running(self) -> set[str]:
        return {wid for wid, state in (await self.launcher.states()).items() if state is RunState.RUNNING}


async def _always() -> bool:
    return True


def make_reconciler(
    redis: "aioredis.Redis",
    redis_url: str,
    logs_dir: Path,
    *,
    module: str = FAKE_WORKER,
    cpu_count: int = 4,
    launcher: Launcher | None = None,
    timing: Timing = TIMING,
    worker_env: Mapping[str, str] | None = None,
) -> tuple[Launcher, Reconciler]:
    chosen = launcher or ProcessLauncher(
        command=worker_command(sys.executable, module),
        env=child_env(redis_url, worker_env),
        logs_dir=logs_dir,
        host=socket.gethostname(),
        cpus=cpu_count,
        poll_interval_s=0.05,
    )
    reconciler = Reconciler(
        WorkerStateStore(redis), chosen, ReconcilerConfig(timing=timing, reconcile_interval_s=0.1)
    )
    return chosen, reconciler


StartHarness = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def start_harness(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path
) -> AsyncIterator[StartHarness]:
    started: list[Harness] = []

    async def start(
        module: str = FAKE_WORKER,
        cpu_count: int = 4,
        adopt: bool = False,
        timing: Timing = TIMING,
        worker_env: Mapping[str, str] | None = None,
    ) -> Harness:
        launcher, reconciler = make_reconciler(
            redis_client,
            redis_server.url,
            tmp_path / "logs",
            module=module,
            cpu_count=cpu_count,
            timing=timing,
            worker_env=worker_env,
        )
        assert isinstance(launcher, ProcessLauncher)
        if adopt:
            await reconciler.adopt()
        stop = asyncio.Event()
        task = asyncio.create_task(reconciler.run(stop, _always))
        exits = asyncio.create_task(reconciler.follow_exits())
        harness = Harness(redis_client, launcher, reconciler, stop, task, exits)
        started.append(harness)
        return harness

    yield start
    for harness in started:
        if harness.halted:
            continue
        if not harness.stop.is_set():
            harness.stop.set()
            await _bounded("reconcile loop", harness.task)
        await _bounded("shutdown", harness.reconciler.shutdown(5.0))
        harness.exits.cancel()
        await _bounded("launcher close", harness.launcher.aclose())
    for harness in started:
        if harness.halted:
            await harness.kill_leftovers()


async def _bounded(step: str, action: Awaitable[None], timeout_s: float = 20.0) -> None:
    """A teardown step that hangs fails the test with every task's stack instead of hanging it."""
    task = asyncio.ensure_future(action)
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if done:
        task.result()
        return
    for other in asyncio.all_tasks():
        other.print_stack(file=sys.stderr)
    task.cancel()
    pytest.fail(f"teardown step hung: {step}")
