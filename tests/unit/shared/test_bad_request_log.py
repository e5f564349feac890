"""The bounded rate of bad-request log lines (sluice.transport.bad_request_log), with a fake clock."""

from aiohttp.http_exceptions import BadStatusLine, InvalidHeader, LineTooLong
from sluice.transport.bad_request_log import LogBudget, reason


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_window_admits_its_limit_and_counts_the_rest() -> None:
    clock = Clock()
    budget = LogBudget(limit=3, interval_s=10.0, clock=clock)
    assert [budget.take()[0] for _ in range(5)] == [True, True, True, False, False]
    clock.now += 9.9
    assert budget.close_window() == 0, "still open"
    assert budget.left_s() > 0
    clock.now += 0.1
    assert budget.left_s() == 0
    assert budget.close_window() == 2
    assert budget.close_window() == 0, "counted once"


def test_the_next_window_opens_at_the_first_event_after_the_last_closed() -> None:
    clock = Clock()
    budget = LogBudget(limit=1, interval_s=10.0, clock=clock)
    assert (budget.take(), budget.take()) == ((True, 0), (False, 0))
    clock.now += 60
    # This event closes the expired window: it is logged, and the closed window's count comes with it.
    assert budget.take() == (True, 1)
    clock.now += 5
    assert budget.take() == (False, 0)
    assert budget.left_s() == 5.0


def test_force_closes_an_open_window() -> None:
    budget = LogBudget(limit=0, interval_s=10.0, clock=Clock())
    assert budget.take() == (False, 0)
    assert budget.close_window(force=True) == 1
    assert budget.left_s() == 0.0


def test_reasons_never_quote_the_request() -> None:
    secret = "Bearer s3cr3t" + "a" * 9000
    assert reason(LineTooLong(secret[:100], 8190)) == "LineTooLong: request line or header over 8190 bytes"
    assert reason(InvalidHeader(secret.encode())) == "InvalidHeader"
    assert reason(BadStatusLine(secret)) == "BadStatusLine"
