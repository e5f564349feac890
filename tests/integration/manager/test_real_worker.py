"""The manager with the real ``python -m sluice_worker`` and the real demo (or echo) archive: the worker loads
the TorchServe handler, announces READY; killed, it is cleaned up at once and replaced; hung beside a
peer (which deletes its record once the heartbeat lapses), it is killed after the grace and replaced."""

import os
import signal
import time
from pathlib import Path

import redis.asyncio as aioredis
from sluice_manager.models.registration import Registrar, RegistrationConfig
from sluice_manager.models.version_config import RegisterOptions
from sluice_manager.stores import Stores
from sluice_manager.supervision.policy import Timing
from sluice_manager.supervision.worker_state import WorkerStateStore
from sluice_worker.demo_model import write_archive

from tests.integration.manager.conftest import Harness, StartHarness, ready_ids
from tests.support.eventually import eventually
from tests.support.models import echo_model, write_mar

# The real worker's heartbeat: a beat every 1 s with a 3 s TTL (sluice_worker.settings).
HEARTBEAT_TTL_S = 3.0


async def test_real_worker_serves_the_demo_model_and_is_replaced_when_killed(
    redis_client: "aioredis.Redis", start_harness: StartHarness, tmp_path: Path
) -> None:
    write_archive(tmp_path / "store")
    harness = await start_harness(module="sluice_worker", cpu_count=2)
    control = Registrar(
        Stores.on(redis_client),
        RegistrationConfig(model_store=tmp_path / "store", models_dir=tmp_path / "models"),
        wake=harness.reconciler.wake,
        download=None,
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


async def test_hung_worker_beside_a_healthy_one_is_killed_after_the_grace_and_replaced(
    redis_client: "aioredis.Redis", start_harness: StartHarness, tmp_path: Path
) -> None:
    # The manager's default grace; the peer scans for dead workers often, so that it always deletes
    # the hung worker's record before the grace runs out (with its default 2 s scan it usually does).
    timing = Timing(heartbeat_grace_s=2.0, stop_timeout_s=5.0)
    harness = await start_harness(
        module="sluice_worker", cpu_count=2, timing=timing, worker_env={"SLUICE_CLAIM_SCAN_INTERVAL_S": "0.2"}
    )
    await _register_echo(redis_client, harness, tmp_path, workers=2)

    async def two_ready() -> bool:
        return len(await ready_ids(redis_client, "echo", "1.0")) == 2

    await eventually(two_ready, timeout_s=120, interval_s=0.2)
    before = await WorkerStateStore(redis_client).launched()
    hung, launch = sorted(before.items())[0]
    stopped_at = time.monotonic()
    # Should the test fail, the harness's shutdown SIGKILLs the stopped worker after its stop timeout.
    os.kill(int(launch.handle), signal.SIGSTOP)

    async def killed() -> bool:
        return hung not in await harness.running()

    # Expected: the heartbeat lapses within its TTL, then the grace; a generous bound far below the
    # version's startupTimeout (120 s), which is what killed it before.
    await eventually(killed, timeout_s=HEARTBEAT_TTL_S + timing.heartbeat_grace_s + 15, interval_s=0.1)
    killed_after_s = time.monotonic() - stopped_at

    async def replaced() -> bool:
        ready = await ready_ids(redis_client, "echo", "1.0")
        return len(ready) == 2 and hung not in ready

    await eventually(replaced, timeout_s=90, interval_s=0.2)
    print(f"hung worker killed after {killed_after_s:.1f} s, 2 READY again after "
          f"{time.monotonic() - stopped_at:.1f} s")  # fmt: skip
    launched = await WorkerStateStore(redis_client).launched()
    assert len(launched) == 2
    assert hung not in launched


async def _register_echo(redis: "aioredis.Redis", harness: Harness, tmp_path: Path, workers: int) -> None:
    write_mar(echo_model(config=f"minWorkers: {workers}\nmaxWorkers: {workers}\n"), tmp_path / "store")
    control = Registrar(
        Stores.on(redis),
        RegistrationConfig(model_store=tmp_path / "store", models_dir=tmp_path / "models"),
        wake=harness.reconciler.wake,
        download=None,
    )
    await control.register(RegisterOptions(url="echo.mar", at_startup=True))
