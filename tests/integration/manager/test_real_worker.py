"""The manager with the real ``python -m sluice_worker`` and the real demo archive: the worker loads
the TorchServe handler, announces READY; killed, it is cleaned up at once and replaced."""

import os
import signal
from pathlib import Path

import redis.asyncio as aioredis
from sluice_manager.models.control_plane import ControlPlane, ControlPlaneConfig
from sluice_manager.models.version_config import RegisterOptions
from sluice_manager.stores import Stores
from sluice_manager.supervision.worker_state import WorkerStateStore
from sluice_worker.demo_model import write_archive

from tests.integration.manager.conftest import StartHarness, ready_ids
from tests.support.eventually import eventually


async def test_real_worker_serves_the_demo_model_and_is_replaced_when_killed(
    redis_client: "aioredis.Redis", start_harness: StartHarness, tmp_path: Path
) -> None:
    write_archive(tmp_path / "store")
    harness = await start_harness(module="sluice_worker", cpu_count=2)
    control = ControlPlane(
        Stores.on(redis_client),
        ControlPlaneConfig(model_store=tmp_path / "store", models_dir=tmp_path / "models"),
        wake=harness.reconciler.wake,
        host="test",
    )
    record = await control.register(RegisterOptions(url="demo.mar", at_startup=True))
    assert (record.model_name, record.version, record.min_workers, record.batch_size) == ("demo", "1.0", 1, 8)

    async def one_ready() -> bool:
        return len(await ready_ids(redis_client, "demo", "1.0")) == 1

    await eventually(one_ready, timeout_s=90, interval_s=0.2)
    [(first, launch)] = (await WorkerStateStore(redis_client).launched()).items()
    os.kill(int(launch.handle), signal.SIGKILL)

    async def replaced() -> bool:
        ready = await ready_ids(redis_client, "demo", "1.0")
        return len(ready) == 1 and first not in ready

    await eventually(replaced, timeout_s=90, interval_s=0.2)
    logs = list((tmp_path / "logs" / "workers").glob("demo-1.0-*.log"))
    assert len(logs) == 2
