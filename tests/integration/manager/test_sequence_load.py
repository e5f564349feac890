"""The load of a stateful version as the manager reads it from a real Redis: its jobs wait in their
sequences' streams, not in the version's shared stream, so its signal is its live sequences (queued
while no worker holds them) and its busy workers are those holding sequences. The keys are written as
the gateway's enqueue_sequence.lua writes them."""

import socket
import time
from typing import Any

import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry.records import VersionRecord
from sluice.registry.store import RegistryStore
from sluice_manager.supervision.launchers.external import ExternalLauncher
from sluice_manager.supervision.reconciler import Reconciler, ReconcilerConfig
from sluice_manager.supervision.worker_state import WorkerStateStore

from tests.integration.manager.conftest import TIMING

IDLE_MS = 60_000


async def register_stateful(redis: "aioredis.Redis", **fields: Any) -> VersionRecord:
    record = VersionRecord(
        model_name="m",
        version="1.0",
        model_url="m.mar",
        model_dir="/nonexistent",
        handler="handler.py",
        sequence_batching=True,
        sequence_max_idle_ms=IDLE_MS,
        **fields,
    )
    await RegistryStore(redis).add(record, make_default=True)
    return record


async def live_sequence(redis: "aioredis.Redis", sequence_id: str, holder: str, now_ms: int) -> None:
    """A sequence as the gateway leaves it once admitted: live until it idles out, held by ``holder``
    ("" while no worker holds it), the holder among the version's holders."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zadd(keys.live_sequences("m", "1.0"), {sequence_id: now_ms + IDLE_MS})
        pipe.sadd(keys.held_sequences("m", "1.0", holder), sequence_id)
        pipe.sadd(keys.sequence_holders("m", "1.0"), holder)
        await pipe.execute()


async def test_the_signal_of_a_stateful_version_counts_its_live_sequences(
    redis_client: "aioredis.Redis",
) -> None:
    await register_stateful(redis_client)
    store = WorkerStateStore(redis_client)
    now = time.time()
    now_ms = int(now * 1000)
    await live_sequence(redis_client, "waiting", "", now_ms)
    await live_sequence(redis_client, "held-1", "w1", now_ms)
    await live_sequence(redis_client, "held-2", "w1", now_ms)
    await live_sequence(redis_client, "held-3", "w2", now_ms)

    signal = await store.signal("m", "1.0", now, {}, stateful=True)
    assert (signal.queued, signal.in_flight, signal.jobs) == (1, 3, 4)
    assert await store.busy_workers("m", "1.0", stateful=True) == {"w1", "w2"}
    # What the version's shared stream says: nothing.
    assert (await store.signal("m", "1.0", now, {})).jobs == 0
    assert await store.busy_workers("m", "1.0") == set()

    # w2's sequence ended (its holder let it go); later every sequence idles out, the unassigned one too.
    await redis_client.srem(keys.held_sequences("m", "1.0", "w2"), "held-3")
    assert await store.busy_workers("m", "1.0", stateful=True) == {"w1"}
    later = now + IDLE_MS / 1000 + 1
    idle = await store.signal("m", "1.0", later, {}, stateful=True)
    assert (idle.queued, idle.in_flight) == (0, 0)


async def test_the_autoscaler_starts_a_worker_for_a_waiting_sequence(redis_client: "aioredis.Redis") -> None:
    await register_stateful(redis_client, min_workers=0, max_workers=2)
    store = WorkerStateStore(redis_client)
    reconciler = Reconciler(store, ExternalLauncher(socket.gethostname()), ReconcilerConfig(timing=TIMING))
    await reconciler.reconcile_once()
    before = await store.scaling_state("m", "1.0")
    assert before is not None
    assert before.desired == 0

    await live_sequence(redis_client, "s", "", int(time.time() * 1000))
    await reconciler.reconcile_once()
    state = await store.scaling_state("m", "1.0")
    assert state is not None
    assert state.desired == 1, "a sequence waits for a holder: scale from zero"
