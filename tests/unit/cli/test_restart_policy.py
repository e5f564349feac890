"""The restart policy of `sluice start`'s supervisor, on a fake clock: at once after a first crash,
longer waits while crashes follow each other, a give-up on a crash loop, a clean slate after a quiet
spell."""

from sluice_cli.restart_policy import GiveUp, Restart, RestartPolicy, decide, recent

POLICY = RestartPolicy(backoff_s=(0.0, 1.0, 2.0, 4.0), crash_loop_crashes=5, window_s=60.0)


class Service:
    """A service on a fake clock: its crash times, as the supervisor keeps them."""

    def __init__(self) -> None:
        self.crashes_s: list[float] = []

    def crash(self, at_s: float) -> Restart | GiveUp:
        self.crashes_s = recent([*self.crashes_s, at_s], at_s, POLICY.window_s)
        return decide(POLICY, self.crashes_s, at_s)


def test_a_first_crash_restarts_at_once() -> None:
    assert Service().crash(at_s=1000.0) == Restart(0.0)


def test_crashes_in_a_row_back_off_then_give_up() -> None:
    service = Service()
    clock_s = 0.0
    delays = []
    for _ in range(4):
        decision = service.crash(clock_s)
        assert isinstance(decision, Restart)
        delays.append(decision.delay_s)
        clock_s += decision.delay_s + 1.5  # the restart, then 1.5 s until it fails again
    assert delays == [0.0, 1.0, 2.0, 4.0]
    assert service.crash(clock_s) == GiveUp("it crashed 5 times within 60 s")


def test_the_longest_delay_repeats() -> None:
    policy = RestartPolicy(backoff_s=(0.0, 3.0), crash_loop_crashes=10, window_s=60.0)
    assert decide(policy, [0.0, 1.0, 2.0, 3.0], 3.0) == Restart(3.0)


def test_crashes_spread_wider_than_the_window_never_give_up() -> None:
    service = Service()
    for index in range(20):
        # Every 61 s: each crash is the first of its window.
        assert service.crash(index * 61.0) == Restart(0.0)


def test_a_quiet_spell_resets_the_backoff() -> None:
    service = Service()
    for at_s in (0.0, 2.0, 5.0):
        service.crash(at_s)
    assert service.crash(7.0) == Restart(4.0)
    assert service.crash(100.0) == Restart(0.0)  # the crashes at 0-7 s no longer count


def test_recent_keeps_what_is_inside_the_window() -> None:
    assert recent([0.0, 10.0, 50.0, 69.0], 70.0, 60.0) == [50.0, 69.0]
