"""The reconcile decision: (desired, observed, timing) -> actions, and the restart backoff."""

import itertools
from dataclasses import replace

import pytest
from sluice_manager.supervision.launchers.base import RunState
from sluice_manager.supervision.policy import (
    BACKOFF_S,
    Actions,
    Desired,
    ObservedWorker,
    Phase,
    Timing,
    decide,
    restart_delay_s,
)

TIMING = Timing(heartbeat_grace_s=2.0, stop_timeout_s=30.0)


def desired(workers: int = 1, active: bool = True) -> Desired:
    return Desired(workers, 120.0, active)


def ready(worker_id: str, **changes: object) -> ObservedWorker:
    base = ObservedWorker(worker_id, owned=True, state=RunState.RUNNING, phase=Phase.READY, heartbeat=True)
    return replace(base, **changes)  # type: ignore[arg-type]


def loading(worker_id: str, age_s: float = 1.0, **changes: object) -> ObservedWorker:
    return ready(worker_id, **{"phase": Phase.NONE, "heartbeat": False, "age_s": age_s, **changes})


def external(worker_id: str, **changes: object) -> ObservedWorker:
    return ready(worker_id, owned=False, state=None, **changes)


# --- counting -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("wanted", "have", "start"), [(0, 0, 0), (1, 0, 1), (3, 1, 2), (2, 2, 0)])
def test_starts_what_is_missing(wanted: int, have: int, start: int) -> None:
    workers = [ready(str(9000 + i)) for i in range(have)]
    assert decide(desired(wanted), workers, TIMING) == Actions(start=start)


def test_loading_workers_count() -> None:
    assert decide(desired(2), [ready("9000"), loading("9001")], TIMING) == Actions()


def test_the_wanted_count_is_kept_whatever_the_range() -> None:
    # The autoscaler chose 3 (between minWorkers and maxWorkers): nothing to do.
    workers = [ready("9000"), ready("9001"), ready("9002")]
    assert decide(desired(3), workers, TIMING) == Actions()


def test_external_workers_count_but_are_never_stopped() -> None:
    assert decide(desired(2), [external("9000"), ready("9001")], TIMING) == Actions()
    actions = decide(desired(0), [external("9000"), ready("9001")], TIMING)
    assert actions.stop == ("9001",)


# --- dead, hung, slow -----------------------------------------------------------------------------


def test_exited_workers_are_forgotten_and_replaced() -> None:
    actions = decide(desired(2), [ready("9000", state=RunState.EXITED), ready("9001")], TIMING)
    assert actions == Actions(start=1, forget=("9000",))


def test_hung_worker_is_killed_after_the_grace() -> None:
    # READY, heartbeat key gone, process still there (SIGSTOP, a stuck event loop).
    within = ready("9000", heartbeat=False, heartbeat_missing_s=1.0)
    assert decide(desired(1), [within], TIMING) == Actions()
    hung = ready("9000", heartbeat=False, heartbeat_missing_s=2.0)
    assert decide(desired(1), [hung], TIMING) == Actions(start=1, kill=("9000",))


def test_hung_worker_whose_record_a_peer_removed_is_killed_after_the_grace() -> None:
    # The other worker's reaper deleted the record of the hung one: no phase left, but it was READY.
    reaped = loading("9000", age_s=10.0, was_ready=True, heartbeat_missing_s=1.0)
    assert decide(desired(2), [reaped, ready("9001")], TIMING) == Actions()
    hung = replace(reaped, heartbeat_missing_s=2.0)
    assert decide(desired(2), [hung, ready("9001")], TIMING) == Actions(start=1, kill=("9000",))


def test_a_once_ready_worker_with_its_heartbeat_back_counts() -> None:
    # SIGCONT before the grace ran out: it beats again (the next beat also brings its record back).
    back = loading("9000", age_s=200.0, was_ready=True, heartbeat=True)
    assert decide(desired(1), [back], TIMING) == Actions()


def test_worker_past_its_startup_timeout_is_killed() -> None:
    assert decide(desired(1), [loading("9000", age_s=119)], TIMING) == Actions()
    assert decide(desired(1), [loading("9000", age_s=120)], TIMING) == Actions(start=1, kill=("9000",))


def test_starting_phase_counts_like_loading() -> None:
    assert decide(desired(1), [loading("9000", phase=Phase.STARTING)], TIMING) == Actions()


def test_a_worker_told_to_stop_is_not_counted_and_killed_past_the_stop_timeout() -> None:
    stopping = ready("9000", stopping_s=5.0)
    assert decide(desired(1), [stopping], TIMING) == Actions(start=1)
    overdue = ready("9000", stopping_s=30.0)
    assert decide(desired(1), [overdue], TIMING) == Actions(start=1, kill=("9000",))


def test_the_versions_own_stop_timeout_replaces_the_default() -> None:
    # ScaleWorker's `timeout`: 2 s instead of Timing's 30 s, 0 at once (its stop was a kill already).
    two_s = Desired(1, 120.0, stop_timeout_s=2.0)
    assert decide(two_s, [ready("9000", stopping_s=1.0)], TIMING) == Actions(start=1)
    assert decide(two_s, [ready("9000", stopping_s=2.0)], TIMING) == Actions(start=1, kill=("9000",))
    at_once = Desired(1, 120.0, stop_timeout_s=0.0)
    assert decide(at_once, [ready("9000", stopping_s=0.0)], TIMING) == Actions(start=1, kill=("9000",))
    longer = Desired(1, 120.0, stop_timeout_s=60.0)
    assert decide(longer, [ready("9000", stopping_s=45.0)], TIMING) == Actions(start=1)


def test_unloading_workers_are_left_alone() -> None:
    assert decide(desired(1), [ready("9000", phase=Phase.UNLOADING)], TIMING) == Actions(start=1)


def test_external_worker_without_heartbeat_is_cleaned_up() -> None:
    fresh = external("9000", heartbeat=False, heartbeat_missing_s=1.0)
    assert decide(desired(1), [fresh], TIMING) == Actions()
    gone = external("9000", heartbeat=False, heartbeat_missing_s=2.0)
    assert decide(desired(1), [gone], TIMING) == Actions(start=1, forget=("9000",))


def test_unannounced_foreign_launch_is_cleaned_up_after_its_startup_timeout() -> None:
    young = external("9000", phase=Phase.NONE, heartbeat=False, age_s=10.0)
    assert decide(desired(1), [young], TIMING) == Actions()
    old = external("9000", phase=Phase.NONE, heartbeat=False, age_s=122.0)
    assert decide(desired(1), [old], TIMING) == Actions(start=1, forget=("9000",))


def test_external_unloading_worker_is_not_counted() -> None:
    assert decide(desired(1), [external("9000", phase=Phase.UNLOADING)], TIMING) == Actions(start=1)


# --- scaling down and removal ---------------------------------------------------------------------


def test_scale_down_prefers_loading_then_idle_then_busy_newest_first() -> None:
    workers = [
        ready("9000", busy=True),
        ready("9001"),
        ready("9002", busy=True),
        ready("9003"),
        loading("9004"),
        external("9005"),
    ]
    assert decide(desired(1), workers, TIMING).stop == ("9004", "9003", "9001", "9002", "9000")
    assert decide(desired(4), workers, TIMING).stop == ("9004", "9003")


def test_scale_down_orders_ids_numerically() -> None:
    workers = [ready("9999"), ready("10000")]
    assert decide(desired(1), workers, TIMING).stop == ("10000",)


def test_inactive_version_stops_everything_it_owns() -> None:
    workers = [ready("9000"), loading("9001"), external("9002"), ready("9003", state=RunState.EXITED)]
    actions = decide(desired(2, active=False), workers, TIMING)
    assert actions == Actions(stop=("9000", "9001"), forget=("9003",))


def test_inactive_version_still_kills_overdue_stops() -> None:
    actions = decide(desired(1, active=False), [ready("9000", stopping_s=31.0)], TIMING)
    assert actions == Actions(kill=("9000",))


# --- backoff --------------------------------------------------------------------------------------


def test_backoff_holds_starts_back() -> None:
    assert decide(desired(2), [ready("9000")], TIMING, backoff_wait_s=0.5) == Actions(backing_off=True)
    assert decide(desired(2), [ready("9000")], TIMING, backoff_wait_s=0.0) == Actions(start=1)


def test_backoff_does_not_hold_back_kills_or_stops() -> None:
    workers = [ready("9000", heartbeat=False, heartbeat_missing_s=5), ready("9001"), ready("9002")]
    actions = decide(desired(1), workers, TIMING, backoff_wait_s=10)
    assert actions == Actions(stop=("9002",), kill=("9000",))


def test_torchserve_backoff_sequence() -> None:
    delays = [restart_delay_s(n, cap_s=10_000) for n in range(1, 20)]
    assert delays[:8] == [0, 1, 1, 2, 3, 5, 8, 13]
    assert delays[-1] == BACKOFF_S[-1]
    assert restart_delay_s(0, cap_s=300) == 0


def test_backoff_is_capped_by_max_retry_timeout() -> None:
    assert restart_delay_s(15, cap_s=300) == 300
    assert restart_delay_s(15, cap_s=60) == 60


# --- invariants over many combinations ------------------------------------------------------------

STATES = [RunState.RUNNING, RunState.EXITED]
PHASES = list(Phase)


def _all_workers() -> list[ObservedWorker]:
    found = []
    for index, (owned, state, phase, heartbeat, missing, stopping) in enumerate(
        itertools.product([True, False], STATES, PHASES, [True, False], [0.0, 5.0], [None, 1.0, 40.0])
    ):
        found.append(
            ObservedWorker(
                str(9000 + index),
                owned=owned,
                state=state if owned else None,
                phase=phase,
                heartbeat=heartbeat,
                heartbeat_missing_s=0.0 if heartbeat else missing,
                age_s=200.0 if index % 2 else 1.0,
                stopping_s=stopping if owned else None,
            )
        )
    return found


@pytest.mark.parametrize("active", [True, False])
@pytest.mark.parametrize("wanted", [0, 1, 3, 40])
def test_invariants(active: bool, wanted: int) -> None:
    workers = _all_workers()
    by_id = {w.worker_id: w for w in workers}
    actions = decide(Desired(wanted, 120.0, active), workers, TIMING)
    acted = [*actions.stop, *actions.kill, *actions.forget]
    assert len(acted) == len(set(acted)), "a worker gets at most one action"
    for worker_id in [*actions.stop, *actions.kill]:
        assert by_id[worker_id].owned, "only our own workers are signalled"
        assert by_id[worker_id].state is RunState.RUNNING
    for worker_id in actions.forget:
        worker = by_id[worker_id]
        assert worker.state is RunState.EXITED or not worker.heartbeat
    assert actions.start >= 0
    if not active:
        assert actions.start == 0
    if actions.start:
        assert not actions.stop
