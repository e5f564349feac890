"""A continuous-batching worker (examples/tiny_gpt, a real process on a real Redis) reports the slots
its running generations hold with every heartbeat, and the manager's autoscaling signal counts them:
generations that leave the handler idle between iterations still make the worker busy. Clients that
leave free their slots at once."""

import asyncio
import json
import signal
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml
from sluice.redis import keys
from sluice.registry.records import VersionRecord, WorkerRecord
from sluice.registry.store import RegistryStore
from sluice_manager.supervision.worker_state import WorkerStateStore

from examples.tiny_gpt.archive import CB_MODEL, build_archive
from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job
from tests.support.eventually import eventually
from tests.support.redis_server import RedisServer

VERSION = "1.0"
SLOTS = 8


def register_tiny_gpt(redis_url: str, root: Path, name: str) -> None:
    """Unpack a tiny_gpt archive (20 ms a token: generations last while a test looks) and register it
    as the manager would."""
    archive = build_archive(root / "store", name, batch_size=SLOTS, step_delay_ms=20)
    model_dir = root / f"{name}-{VERSION}"
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(model_dir)
    manifest = json.loads((model_dir / "MAR-INF" / "MANIFEST.json").read_text())
    config = yaml.safe_load((model_dir / "model-config.yaml").read_text())
    record = VersionRecord(
        model_name=name,
        version=VERSION,
        model_url=archive.name,
        model_dir=str(model_dir),
        handler=manifest["model"]["handler"],
        batch_size=SLOTS,
        max_batch_delay_ms=5,
        continuous_batching=bool(config.get("continuousBatching")),
        async_communication=bool(config.get("asyncCommunication")),
        model_yaml_config=config,
    )

    async def register() -> None:
        client: aioredis.Redis = aioredis.Redis.from_url(redis_url)
        try:
            await RegistryStore(client).add(record, make_default=True)
        finally:
            await client.aclose()

    asyncio.run(register())


def serving(redis_url: str, root: Path, name: str, **env: str) -> Iterator[WorkerProcess]:
    register_tiny_gpt(redis_url, root, name)
    process = WorkerProcess(redis_url, name, VERSION, root, env=env).start()
    try:
        process.wait_ready()
        yield process
    finally:
        process.send(signal.SIGTERM)
        assert process.wait() == 0, process.log()


@pytest.fixture
def worker(module_redis: RedisServer, tmp_path: Path) -> Iterator[WorkerProcess]:
    yield from serving(module_redis.url, tmp_path, CB_MODEL)


async def worker_record(client: "aioredis.Redis", worker: WorkerProcess) -> WorkerRecord | None:
    raw = await client.hget(keys.workers(CB_MODEL, VERSION), worker.worker_id or "")
    return WorkerRecord.from_json(raw) if raw else None


async def test_running_generations_count_as_load_and_leaving_clients_free_their_slots(
    client: "aioredis.Redis", worker: WorkerProcess
) -> None:
    store = WorkerStateStore(client)
    replies = await ReplyStream(client).open()
    jobs = [
        job(
            CB_MODEL,
            VERSION,
            {"data": json.dumps({"prompt": "kserve", "max_new_tokens": 400}).encode()},
            reply_to=replies.key,
        )
        for _ in range(4)
    ]
    await enqueue(client, *jobs)

    async def holding(count: int) -> bool:
        record = await worker_record(client, worker)
        return record is not None and record.running == count and record.slots == SLOTS

    await eventually(lambda: holding(4), timeout_s=10)
    signal_now = await store.signal(CB_MODEL, VERSION, time.time(), await store.announced(CB_MODEL, VERSION))
    assert signal_now.queued == 0, "nothing waits: only the slots held show the load"
    assert signal_now.busy >= 0.5, signal_now
    for item in jobs:
        await client.set(keys.cancel(CB_MODEL, VERSION, item.job_id), 1, px=60_000)
    await eventually(lambda: holding(0), timeout_s=10)
    finals = await replies.finals([item.job_id for item in jobs], timeout_s=10)
    for item in jobs:
        *chunks, last = finals[item.job_id]
        assert chunks, "each generation streamed before its client left"
        assert last.error_code == "CANCELLED"
        assert last.seq == len(chunks)
