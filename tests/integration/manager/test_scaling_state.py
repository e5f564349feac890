"""The autoscaler's state kept in a real Redis: it comes back as it was saved (a restarted manager
resumes mid-window), and a state saved by an older manager is read for what it still holds. And its
signal's busy time: only workers whose heartbeat is alive count."""

import json

import redis.asyncio as aioredis
from sluice.redis import keys
from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice_manager.supervision.autoscale import ScalingState
from sluice_manager.supervision.worker_state import AnnouncedWorker, WorkerStateStore


async def test_a_saved_state_comes_back_as_it_was(redis_client: "aioredis.Redis") -> None:
    store = WorkerStateStore(redis_client)
    state = ScalingState(
        desired=3, changed_at_s=10.5, recent=((11.0, 3), (12.0, 2)), below_since_s=12.0, peak_while_below=2
    )
    await store.put_scaling_state("m", "1.0", state)
    assert await store.scaling_state("m", "1.0") == state


async def test_an_older_managers_state_keeps_its_count_and_drops_what_changed(
    redis_client: "aioredis.Redis",
) -> None:
    older = {
        "desired": 2,
        "changed_at_s": 5.0,
        "above_since_s": None,
        "below_since_s": 7.0,
        "peak_while_below": 1,
    }
    await redis_client.hset(keys.SCALING, "m:1.0", json.dumps(older))
    assert await WorkerStateStore(redis_client).scaling_state("m", "1.0") == ScalingState(
        desired=2, changed_at_s=5.0, below_since_s=7.0, peak_while_below=1
    )


async def test_the_signal_sums_the_busy_shares_of_live_workers_only(redis_client: "aioredis.Redis") -> None:
    def worker(worker_id: str, busy_share: float, heartbeat: bool) -> AnnouncedWorker:
        record = WorkerRecord(
            worker_id=worker_id,
            pid=1,
            host="h",
            status=WorkerStatus.READY,
            started_unix_ms=0,
            busy_share=busy_share,
        )
        return AnnouncedWorker(record, heartbeat)

    workers = {"a": worker("a", 0.5, True), "b": worker("b", 0.75, True), "dead": worker("dead", 1.0, False)}
    signal = await WorkerStateStore(redis_client).signal("m", "1.0", 0.0, workers)
    assert signal.busy == 1.25
