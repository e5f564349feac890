"""The reconcile loop (the real Reconciler, scaler and adoption) against the in-memory store and the
fake launcher, on a simulated clock (tests/support/reconcile_sim.py): starting workers, crashes and
the restart backoff, hung and never-ready workers, scaling up and down with drain, a manager restart
with adoption, GPU placement. tests/integration/manager/test_reconciler.py runs the same loop on a real
Redis with real processes."""

from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from typing import Any

import pytest
from sluice.registry.records import VersionRecord, WorkerRecord, WorkerStatus
from sluice_manager.supervision.launchers.base import WorkerExit
from sluice_manager.supervision.policy import BACKOFF_S
from structlog.testing import capture_logs

from tests.support.fake_launcher import KILLED, STOPPED
from tests.support.reconcile_sim import HEARTBEAT_TTL_S, LEASE_TTL_S, NEVER, TIMING, Behaviour, Sim

M, V = "m", "1.0"
KEY = (M, V)
# What the loop logs when a pass or an exit's handling raised: never expected here.
LOOP_FAILURES = {"reconcile failed", "worker exit handling failed"}

Logs = list[MutableMapping[str, Any]]


def version(
    model: str = M, *, min_workers: int = 1, max_workers: int | None = None, **fields: Any
) -> VersionRecord:
    return VersionRecord(
        model_name=model,
        version=V,
        model_url=f"{model}.mar",
        model_dir=f"/models/{model}",
        handler="handler.py",
        min_workers=min_workers,
        max_workers=min_workers if max_workers is None else max_workers,
        **fields,
    )


@pytest.fixture
def logs() -> Iterator[Logs]:
    with capture_logs() as captured:
        yield captured
    assert not [entry for entry in captured if entry["event"] in LOOP_FAILURES]


@pytest.fixture
async def new_sim(logs: Logs) -> AsyncIterator[Callable[..., Sim]]:
    made: list[Sim] = []

    def make(**options: Any) -> Sim:
        made.append(Sim(**options))
        return made[-1]

    yield make
    for sim in made:
        await sim.close()


@pytest.fixture
async def sim(new_sim: Callable[..., Sim]) -> Sim:
    return new_sim()


def scaled(logs: Logs) -> list[tuple[int, int, str]]:
    return [(e["from_workers"], e["to_workers"], e["reason"]) for e in logs if e["event"] == "workers scaled"]


# --- starting ----------------------------------------------------------------------------------------


async def test_starts_the_missing_workers_once(sim: Sim) -> None:
    sim.store.register(version(min_workers=2))
    await sim.tick()
    assert sim.started() == ["9000", "9001"]
    records = sim.store.launch_records
    assert {wid: r.handle for wid, r in records.items()} == {w: sim.host.workers[w].handle for w in records}
    assert {r.placement.torch_threads for r in records.values()} == {2}, "4 cores shared by 2 workers"
    await sim.tick()  # they announce READY; the pass notes when
    ready_ms = int(sim.clock() * 1000)
    await sim.run_for(5)
    assert sim.started() == ["9000", "9001"], "no extra workers"
    assert {r.ready_unix_ms for r in sim.store.launch_records.values()} == {ready_ms}


async def test_workers_the_launcher_does_not_run_count_until_their_heartbeat_is_gone(sim: Sim) -> None:
    sim.store.register(version())
    elsewhere = WorkerRecord(worker_id="w1", pid=1, host="elsewhere", status=WorkerStatus.READY,
                             started_unix_ms=int(sim.clock() * 1000))  # fmt: skip
    sim.store.announce(M, V, elsewhere, ttl_s=HEARTBEAT_TTL_S)  # then it stops beating
    await sim.run_for(HEARTBEAT_TTL_S + TIMING.heartbeat_grace_s - 1)
    assert sim.started() == []
    await sim.tick()
    assert "w1" not in await sim.store.announced(M, V)
    assert sim.started() == ["9000"], "replaced in the pass that forgot it"


# --- crashes and the restart backoff -------------------------------------------------------------


async def test_a_crashed_worker_is_cleaned_up_at_once_and_replaced(sim: Sim) -> None:
    sim.store.register(version())
    await sim.run_for(2)
    sim.host.exit("9000", 1)
    await sim.settle()  # the exit event alone, before any pass
    assert "9000" not in sim.store.launch_records
    assert "9000" not in await sim.store.announced(M, V)
    assert not sim.store.heartbeat_alive(M, V, "9000"), "deleted, not left to its TTL"
    assert (await sim.store.restart_streak(M, V)).failures == 1
    await sim.tick()
    assert sim.running() == {"9001"}
    await sim.tick()  # READY: the streak is over
    assert sim.store.streaks == {}


async def test_an_exit_a_pass_sees_first_counts_once(sim: Sim) -> None:
    sim.store.register(version())
    await sim.run_for(2)
    sim.manager.follower.cancel()  # the exit event comes late
    sim.host.exit("9000", 1)
    sim.clock.advance(1)
    await sim.one_pass()
    assert (await sim.store.restart_streak(M, V)).failures == 1
    assert sim.running() == {"9001"}
    assert "9000" not in sim.store.launch_records
    await sim.manager.reconciler.on_worker_exit(WorkerExit("9000", 1))
    assert (await sim.store.restart_streak(M, V)).failures == 1


@pytest.mark.parametrize(
    ("cap_s", "delays_s"), [(300, [0, 1, 1, 2, 3, 5]), (2, [0, 1, 1, 2, 2, 2])], ids=["uncapped", "capped"]
)
async def test_a_failing_worker_is_restarted_with_backoff(sim: Sim, cap_s: int, delays_s: list[int]) -> None:
    assert delays_s[:4] == list(BACKOFF_S[:4])
    step_s = 0.25
    sim.store.register(version(max_retry_timeout_s=cap_s))
    sim.workers.behaviours[KEY] = Behaviour(exit_code=3)  # each fails to load
    await sim.run_for(sum(delays_s) + 2.5, step_s=step_s)
    workers = [sim.host.workers[wid] for wid in sim.started()]
    assert len(workers) > len(delays_s)
    for failed, (delay_s, after) in enumerate(zip(delays_s, workers[1:], strict=False), start=1):
        gap_s = after.started_s - (workers[failed - 1].ended_s or 0)
        assert delay_s <= gap_s < delay_s + step_s, f"start after failure {failed}"
    # A worker that gets READY ends the streak: the next crash is restarted at once.
    del sim.workers.behaviours[KEY]
    await sim.run_for(10, step_s=step_s)
    assert sim.store.streaks == {}
    [ready] = sim.running()
    sim.host.exit(ready, 1)
    await sim.tick(step_s)
    assert len(sim.running()) == 1
    assert sim.running() != {ready}


async def test_a_launcher_that_cannot_start_backs_off(sim: Sim, logs: Logs) -> None:
    sim.manager.launcher.fail_starts = True
    sim.store.register(version())
    await sim.tick()
    await sim.tick()  # the first failure waits 0 s
    assert (await sim.store.restart_streak(M, V)).failures == 2
    await sim.tick(0.5)
    assert (await sim.store.restart_streak(M, V)).failures == 2, "the second waits 1 s"
    sim.manager.launcher.fail_starts = False
    await sim.tick(0.5)
    assert sim.started() == ["9002"]
    assert [e["event"] for e in logs].count("could not start worker") == 2


# --- hung and never-ready workers ----------------------------------------------------------------


@pytest.mark.parametrize("peers_reap", [False, True], ids=["record-kept", "record-reaped-by-peers"])
async def test_a_hung_worker_is_killed_after_the_grace_and_replaced_in_the_same_pass(
    sim: Sim, peers_reap: bool
) -> None:
    """With its record reaped, only the launch record's READY stamp tells the hung worker from one
    still loading (whose timeout, 120 s, is far longer)."""
    sim.store.register(version(startup_timeout_s=120))
    sim.workers.peers_reap_lapsed = peers_reap
    await sim.run_for(2)
    sim.workers.hung.add("9000")
    hung_at = sim.clock()
    await sim.run_for(HEARTBEAT_TTL_S + TIMING.heartbeat_grace_s - 0.5, step_s=0.5)
    assert sim.running() == {"9000"}, "not before the grace is over"
    assert ("9000" in await sim.store.announced(M, V)) is not peers_reap
    await sim.tick(0.5)
    hung = sim.host.workers["9000"]
    assert hung.exit_code == KILLED
    assert hung.ended_s == hung_at + HEARTBEAT_TTL_S + TIMING.heartbeat_grace_s
    assert sim.running() == {"9001"}
    assert sim.host.workers["9001"].started_s == hung.ended_s


async def test_a_worker_that_never_gets_ready_is_killed_at_its_startup_timeout(sim: Sim) -> None:
    sim.store.register(version(startup_timeout_s=10))
    sim.workers.behaviours[KEY] = Behaviour(load_s=NEVER)
    await sim.tick()
    await sim.run_for(9.5, step_s=0.5)
    assert sim.running() == {"9000"}
    await sim.tick(0.5)
    first = sim.host.workers["9000"]
    assert first.exit_code == KILLED
    assert first.ended_s == first.started_s + 10
    assert sim.running() == {"9001"}


# --- scaling -------------------------------------------------------------------------------------


async def test_scaling_down_drains_the_newest_idle_worker(sim: Sim) -> None:
    sim.store.register(version(min_workers=3))
    await sim.run_for(2)
    sim.store.enqueue(M, V)
    sim.store.take(M, V, "9002")  # the newest holds a job
    sim.host.slow_to_stop.add("9001")
    sim.store.register(version(min_workers=2))  # ScaleWorker
    await sim.tick()
    draining = sim.host.workers["9001"]
    assert draining.stopping
    assert draining.running
    assert sim.store.launch_records["9001"].stop_requested_unix_ms == int(sim.clock() * 1000)
    await sim.run_for(5)
    assert sim.started() == ["9000", "9001", "9002"], "a draining worker is not replaced"
    sim.host.exit("9001", STOPPED)  # drained
    await sim.tick()
    assert sim.running() == {"9000", "9002"}
    assert set(sim.store.launch_records) == {"9000", "9002"}
    assert sim.store.streaks == {}, "a requested stop is not a failure"
    assert len(sim.started()) == 3


async def test_a_worker_still_draining_at_the_stop_timeout_is_killed(sim: Sim) -> None:
    sim.store.register(version(min_workers=2))
    await sim.run_for(2)
    sim.host.slow_to_stop.add("9001")
    sim.store.register(version(min_workers=1))
    await sim.tick()
    await sim.run_for(TIMING.stop_timeout_s - 1)
    assert sim.running() == {"9000", "9001"}
    await sim.tick()
    assert sim.host.workers["9001"].exit_code == KILLED
    assert sim.running() == {"9000"}
    assert set(sim.store.launch_records) == {"9000"}
    assert sim.store.streaks == {}


async def test_load_scales_up_then_idle_workers_drain_back_to_the_minimum(sim: Sim, logs: Logs) -> None:
    sim.store.register(
        version(
            min_workers=1,
            max_workers=3,
            target_jobs_per_worker=2,
            scale_up_after_ms=2000,
            scale_down_after_ms=10_000,
            scale_cooldown_ms=5000,
        )
    )
    await sim.run_for(2)
    sim.store.enqueue(M, V, 6)  # three workers' worth
    await sim.run_for(2)
    assert sim.started() == ["9000"], "a need is acted on once sustained for scaleUpAfter"
    await sim.tick()
    assert sim.started() == ["9000", "9001", "9002"]
    assert scaled(logs) == [(1, 3, "backlog")]
    sim.store.clear_jobs(M, V)  # the backlog is gone but for a job 9001 holds
    sim.store.enqueue(M, V)
    sim.store.take(M, V, "9001")
    await sim.run_for(10)
    assert len(sim.running()) == 3, "not before scaleDownAfter of low load"
    await sim.run_for(2)
    assert sim.running() == {"9001"}, "the idle ones go, the busy one stays"
    assert {sim.host.workers[w].exit_code for w in ("9000", "9002")} == {STOPPED}
    assert scaled(logs) == [(1, 3, "backlog"), (3, 1, "idle")]
    assert (await sim.store.scaling_state(M, V)) is not None
    assert sim.store.streaks == {}


async def test_a_version_being_removed_loses_its_workers(sim: Sim) -> None:
    sim.store.register(version(min_workers=2))
    sim.store.register(version("other"))
    await sim.run_for(2)
    sim.store.mark_removing(M, V)
    await sim.tick()
    await sim.run_for(3)
    assert {w: sim.host.workers[w].exit_code for w in ("9000", "9001")} == {"9000": STOPPED, "9001": STOPPED}
    assert sim.running() == {"9002"}
    assert set(sim.store.launch_records) == {"9002"}
    assert len(sim.started()) == 3


# --- a manager restart ---------------------------------------------------------------------------


async def test_a_restarted_manager_waits_for_the_lease_then_adopts_without_duplicates(sim: Sim) -> None:
    sim.store.register(version(min_workers=2))
    await sim.run_for(2)
    renewed_at = sim.clock()
    first = sim.manager
    await sim.kill_manager(first)
    sim.host.exit("9000", 1)  # dies while no manager runs
    second = sim.start_manager()
    await sim.run_for(LEASE_TTL_S / 2)
    assert sim.started() == ["9000", "9001"], "the dead manager's lease still holds"
    await sim.take_over()
    assert sim.clock() == renewed_at + LEASE_TTL_S
    assert "9000" not in sim.store.launch_records
    assert "9000" not in await sim.store.announced(M, V)
    assert set(await second.launcher.states()) == {"9001"}
    await sim.tick()
    assert sim.running() == {"9001", "9002"}, "one replacement, no duplicate"
    await sim.run_for(3)
    assert len(sim.started()) == 3
    sim.host.exit("9001", 1)  # the adopted worker is watched
    await sim.tick()
    assert "9001" not in sim.store.launch_records
    assert sim.running() == {"9002", "9003"}


async def test_a_worker_started_but_never_recorded_is_adopted_from_its_announcement(sim: Sim) -> None:
    sim.store.register(version())
    await sim.run_for(2)
    await sim.kill_manager(sim.manager)
    del sim.store.launch_records["9000"]  # the manager died between starting it and recording it
    second = sim.start_manager()
    await sim.take_over()
    assert sim.store.launch_records["9000"].handle == sim.host.workers["9000"].handle
    await sim.run_for(3)
    assert sim.started() == ["9000"], "no duplicate"
    sim.store.mark_removing(M, V)
    await sim.tick()
    assert sim.host.workers["9000"].exit_code == STOPPED, "the new manager can stop it"
    assert await second.launcher.states() == {}


# --- placement -----------------------------------------------------------------------------------


async def test_gpus_are_handed_out_round_robin_across_versions(new_sim: Callable[..., Sim]) -> None:
    """Workers started in one pass for several versions count toward each other's GPU."""
    sim = new_sim(cpus=4, gpu_ids=(0, 1))
    sim.store.register(version("a"))
    sim.store.register(version("b", min_workers=2))
    sim.store.register(version("c", device_type="cpu"))
    await sim.tick()
    records = sim.store.launch_records
    assert {wid: (r.model_name, r.placement.gpu_id) for wid, r in records.items()} == {
        "9000": ("a", 0),
        "9001": ("b", 1),
        "9002": ("b", 0),
        "9003": ("c", None),
    }
    assert {r.placement.torch_threads for r in records.values()} == {1}, "4 cores, 4 workers planned"


async def test_two_single_worker_models_started_together_take_both_gpus(new_sim: Callable[..., Sim]) -> None:
    sim = new_sim(gpu_ids=(0, 1))
    sim.store.register(version("a"))
    sim.store.register(version("b"))
    await sim.tick()
    assert {r.model_name: r.placement.gpu_id for r in sim.store.launch_records.values()} == {"a": 0, "b": 1}


async def test_a_restarted_manager_places_new_workers_beside_the_adopted_ones(
    new_sim: Callable[..., Sim],
) -> None:
    sim = new_sim(gpu_ids=(0, 1))
    sim.store.register(version(min_workers=2))
    await sim.run_for(2)
    await sim.kill_manager(sim.manager)
    sim.host.exit("9001", 1)  # the worker on GPU 1 dies while no manager runs
    sim.start_manager()
    await sim.take_over()
    await sim.tick()
    assert {wid: r.placement.gpu_id for wid, r in sim.store.launch_records.items()} == {"9000": 0, "9002": 1}


async def test_shutdown_stops_every_worker_and_drops_their_records(sim: Sim) -> None:
    sim.store.register(version(min_workers=2))
    await sim.run_for(2)
    await sim.manager.reconciler.shutdown(5.0)
    assert sim.running() == set()
    assert {sim.host.workers[w].exit_code for w in ("9000", "9001")} == {STOPPED}
    assert sim.store.launch_records == {}
    assert await sim.store.announced(M, V) == {}
    assert sim.store.streaks == {}
