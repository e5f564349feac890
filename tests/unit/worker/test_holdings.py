"""The sequences a worker holds: one job at a time per sequence, fair turns, state handed out once."""

from sluice_worker.broker.sequences.holdings import Held, Holdings


def test_a_sequence_with_a_job_in_hand_is_not_idle_until_that_job_is_finished() -> None:
    holdings = Holdings()
    holdings.add("a")
    holdings.add("b")
    holdings.take("a", b"1-0", starts=False)
    assert holdings.idle() == ["b"]
    holdings.release("a")
    assert set(holdings.idle()) == {"a", "b"}


def test_idle_sequences_come_in_turns_the_one_served_longest_ago_first() -> None:
    holdings = Holdings()
    for sid in ("a", "b", "c"):
        holdings.add(sid)
    first = holdings.idle()[0]
    holdings.take(first, b"1-0", starts=False)
    holdings.release(first)
    assert holdings.idle()[-1] == first


def test_a_new_sequence_comes_first() -> None:
    holdings = Holdings()
    holdings.add("old")
    holdings.take("old", b"1-0", starts=False)
    holdings.release("old")
    holdings.add("new")
    assert holdings.idle() == ["new", "old"]


def test_adding_a_held_sequence_changes_nothing() -> None:
    holdings = Holdings()
    holdings.add("a", Held(restore=b"state"))
    assert not holdings.add("a")
    turn, _ = holdings.take("a", b"1-0", starts=False)
    assert turn.restore == b"state"


def test_a_saved_state_is_handed_out_with_the_next_job_only() -> None:
    holdings = Holdings()
    holdings.add("a", Held(restore=b"state"))
    first, _ = holdings.take("a", b"1-0", starts=False)
    holdings.release("a")
    second, _ = holdings.take("a", b"2-0", starts=False)
    assert (first.restore, second.restore) == (b"state", None)


def test_the_job_that_was_running_when_the_sequence_moved_counts_a_delivery_more() -> None:
    holdings = Holdings()
    holdings.add("a", Held(moved_head=b"1-0", moved_attempt=2))
    _, attempt = holdings.take("a", b"1-0", starts=False)
    holdings.release("a")
    _, later = holdings.take("a", b"2-0", starts=False)
    assert (attempt, later) == (2, 1)


def test_a_lost_sequence_stays_lost_until_a_job_starts_it_again() -> None:
    holdings = Holdings()
    holdings.add("a", Held(lost=True, restore=None))
    turn, _ = holdings.take("a", b"1-0", starts=False)
    holdings.release("a")
    restarted, _ = holdings.take("a", b"2-0", starts=True)
    assert (turn.lost, restarted.lost) == (True, False)


def test_a_state_that_did_not_load_loses_the_sequence() -> None:
    holdings = Holdings()
    holdings.add("a", Held(restore=b"bad"))
    holdings.take("a", b"1-0", starts=False)
    holdings.release("a", lost=True)
    turn, _ = holdings.take("a", b"2-0", starts=False)
    assert turn.lost


def test_dropping_forgets_a_sequence() -> None:
    holdings = Holdings()
    holdings.add("a")
    holdings.drop("a")
    holdings.drop("a")
    assert ("a" in holdings, len(holdings)) == (False, 0)
