"""Which workers are dead, and which jobs have used up their deliveries."""

from sluice_worker.broker.reclaim import dead_workers, exhausted


def test_dead_workers_are_the_others_without_a_heartbeat() -> None:
    alive = {"9000": True, "9001": False}
    assert dead_workers(["9002", "9000", "9001", "me"], alive, me="me") == ["9001", "9002"]
    assert dead_workers(["me"], {}, me="me") == []
    assert dead_workers([], {}, me="me") == []


def test_a_job_runs_at_most_max_deliveries_times() -> None:
    assert [exhausted(n, max_deliveries=3) for n in range(1, 6)] == [False, False, False, True, True]
