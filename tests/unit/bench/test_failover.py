"""The failover bench's reading of a kill: the outage runs from the first failure to the first call
answered after it; failures are counted by status, those while the killed server rejoined apart."""

import math

from bench.failover import CallRecord, outage_of


def test_the_outage_runs_from_the_first_failure_to_the_next_answer() -> None:
    calls = [
        CallRecord(0.0, 0.9),  # answered before the kill
        CallRecord(0.8, 1.5, "UNAVAILABLE"),  # in flight at the kill
        CallRecord(1.5, 1.6, "UNAVAILABLE"),
        CallRecord(1.2, 3.4),  # waited out the failover: started before the first failure
        CallRecord(2.0, 3.2, "DEADLINE_EXCEEDED"),
        CallRecord(3.3, 3.5),  # the first call answered after the first failure
    ]
    outage = outage_of(calls, killed_at=1.0, rejoining_at=10.0)
    assert math.isclose(outage.outage_s, 2.0)
    assert math.isclose(outage.served_again_after_kill_s, 2.5)
    assert outage.failed == {"UNAVAILABLE": 2, "DEADLINE_EXCEEDED": 1}
    assert outage.calls == 6


def test_no_failure_means_the_outage_is_measured_from_the_kill() -> None:
    outage = outage_of([CallRecord(0.5, 1.2), CallRecord(1.3, 1.4)], killed_at=1.0, rejoining_at=10.0)
    assert math.isclose(outage.outage_s, 0.4)
    assert outage.failed == {}


def test_failures_while_the_killed_server_rejoins_are_counted_apart() -> None:
    calls = [
        CallRecord(1.0, 1.5, "UNAVAILABLE"),
        CallRecord(1.6, 2.0),
        CallRecord(5.0, 5.1, "UNAVAILABLE"),  # the killed server restarting, after the failover
        CallRecord(5.2, 5.3),
    ]
    outage = outage_of(calls, killed_at=1.0, rejoining_at=4.0)
    assert math.isclose(outage.outage_s, 0.5)
    assert outage.failed == {"UNAVAILABLE": 1}
    assert outage.failed_rejoining == 1
