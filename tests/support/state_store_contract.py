"""The supervision store contract (sluice_manager.supervision.state_store.SupervisionStore): what the
reconcile loop relies on a store for, written once and run against each store — the in-memory one the
unit tier drives the loop with, and the Redis one (WorkerStateStore).

A test module binds :data:`CONTRACT` to its store through a :class:`StoreUnderTest`: the store, and
how the other writers reach it (the registry, the workers, the gateways' job streams) and how time
passes (a simulated clock advanced, or a real wait on Redis).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sluice.registry.records import VersionRecord, WorkerRecord, WorkerStatus
from sluice_manager.supervision.autoscale import ScalingState
from sluice_manager.supervision.launchers.base import LaunchRecord, Placement
from sluice_manager.supervision.state_store import SupervisionStore

M, V = "m", "1.0"
# Short enough to wait out on a real Redis.
TTL_S = 0.3


@dataclass
class StoreUnderTest:
    store: SupervisionStore
    # The registry adds a version (active, or being removed).
    register: Callable[[VersionRecord, bool], Awaitable[None]]
    # A worker writes its record and heartbeat (with this TTL).
    announce: Callable[[str, str, WorkerRecord, float], Awaitable[None]]
    # A gateway enqueues jobs; a worker reads (and holds) some.
    enqueue: Callable[[str, str, int], Awaitable[None]]
    take: Callable[[str, str, str, int], Awaitable[None]]
    # Time passes; what time it is (seconds, the store's clock).
    wait: Callable[[float], Awaitable[None]]
    now: Callable[[], float]


def version(model: str = M) -> VersionRecord:
    return VersionRecord(
        model_name=model, version=V, model_url=f"{model}.mar", model_dir=f"/m/{model}", handler="h.py"
    )


def launch(worker_id: str, model: str = M) -> LaunchRecord:
    return LaunchRecord(
        worker_id=worker_id,
        model_name=model,
        version=V,
        launcher="fake",
        handle="1234",
        placement=Placement(host="h", torch_threads=2, gpu_id=1),
        started_unix_ms=1000,
        details={"log_path": "/logs/w.log"},
    )


def worker(worker_id: str, busy_share: float = 0.0) -> WorkerRecord:
    return WorkerRecord(
        worker_id=worker_id,
        pid=1234,
        host="h",
        status=WorkerStatus.READY,
        started_unix_ms=1000,
        busy_share=busy_share,
    )


async def registered_versions_tell_active_from_removing(under: StoreUnderTest) -> None:
    await under.register(version("a"), True)
    await under.register(version("b"), False)
    found = await under.store.registered_versions()
    assert {key: (v.record, v.active) for key, v in found.items()} == {
        ("a", V): (version("a"), True),
        ("b", V): (version("b"), False),
    }


async def launch_records_are_kept_and_forgotten_with_the_worker(under: StoreUnderTest) -> None:
    store = under.store
    assert await store.launched() == {}
    await store.put_launched(launch("9000"))
    await store.put_launched(launch("9001"))
    stamped = launch("9001").model_copy(update={"ready_unix_ms": 2000})
    await store.put_launched(stamped)
    assert await store.launched() == {"9000": launch("9000"), "9001": stamped}
    assert await store.launched_one("9001") == stamped
    await under.announce(M, V, worker("9000"), 30.0)
    await under.announce(M, V, worker("9001"), 30.0)
    await store.forget_worker(M, V, "9000")
    assert await store.launched_one("9000") is None
    assert set(await store.launched()) == {"9001"}
    assert set(await store.announced(M, V)) == {"9001"}


async def a_heartbeat_lapses_after_its_ttl_and_the_record_stays(under: StoreUnderTest) -> None:
    await under.announce(M, V, worker("9000"), TTL_S)
    await under.announce(M, V, worker("9001"), 30.0)
    before = await under.store.announced(M, V)
    assert {wid: seen.heartbeat for wid, seen in before.items()} == {"9000": True, "9001": True}
    assert before["9000"].record == worker("9000")
    await under.wait(TTL_S + 0.2)
    after = await under.store.announced(M, V)
    assert {wid: seen.heartbeat for wid, seen in after.items()} == {"9000": False, "9001": True}
    assert await under.store.announced("other", V) == {}


async def restart_streaks_count_per_version_and_clear(under: StoreUnderTest) -> None:
    store = under.store
    assert (await store.restart_streak(M, V)).failures == 0
    first = await store.record_failure(M, V, "/logs/a.log")
    await under.wait(0.05)
    second = await store.record_failure(M, V)
    now_ms = under.now() * 1000
    assert (second.failures, second.first_failure_unix_ms) == (2, first.first_failure_unix_ms)
    assert (
        first.last_failure_unix_ms
        < second.last_failure_unix_ms
        <= now_ms
        < first.first_failure_unix_ms + 5000
    )
    assert second.last_failure_log == ""
    assert await store.restart_streak(M, V) == second
    assert (await store.restart_streak("other", V)).failures == 0
    await store.clear_streak(M, V)
    assert (await store.restart_streak(M, V)).failures == 0


async def worker_ids_are_fresh(under: StoreUnderTest) -> None:
    ids = [await under.store.next_worker_id() for _ in range(3)]
    assert len(set(ids)) == 3
    assert [int(i) for i in ids] == sorted(int(i) for i in ids)


async def scaling_state_is_kept_per_version(under: StoreUnderTest) -> None:
    store = under.store
    assert await store.scaling_state(M, V) is None
    state = ScalingState(desired=3, changed_at_s=12.5, recent=((10.0, 2), (11.0, 3)), below_since_s=None)
    await store.put_scaling_state(M, V, state)
    assert await store.scaling_state(M, V) == state
    assert await store.scaling_state("other", V) is None
    await store.put_scaling_state(M, V, ScalingState(desired=1))
    assert await store.scaling_state(M, V) == ScalingState(desired=1)


async def workers_holding_jobs_are_busy_and_jobs_make_the_signal(under: StoreUnderTest) -> None:
    store = under.store
    assert await store.busy_workers(M, V) == set()
    await under.enqueue(M, V, 3)
    await under.take(M, V, "9001", 2)
    assert await store.busy_workers(M, V) == {"9001"}
    await under.announce(M, V, worker("9000", busy_share=0.25), 30.0)
    await under.announce(M, V, worker("9001", busy_share=0.5), TTL_S)
    await under.wait(TTL_S + 0.2)  # 9001's heartbeat lapsed: its share no longer counts
    at_s = under.now()
    signal = await store.signal(M, V, at_s, await store.announced(M, V))
    assert (signal.at_s, signal.queued, signal.in_flight, signal.busy) == (at_s, 1, 2, 0.25)
    assert 0.0 < signal.oldest_age_s < 5.0


CONTRACT: list[Callable[[StoreUnderTest], Awaitable[None]]] = [
    registered_versions_tell_active_from_removing,
    launch_records_are_kept_and_forgotten_with_the_worker,
    a_heartbeat_lapses_after_its_ttl_and_the_record_stays,
    restart_streaks_count_per_version_and_clear,
    worker_ids_are_fresh,
    scaling_state_is_kept_per_version,
    workers_holding_jobs_are_busy_and_jobs_make_the_signal,
]
CONTRACT_IDS = [check.__name__ for check in CONTRACT]
