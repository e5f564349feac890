"""The restart policy of `sluice start`'s supervisor, on a fake clock: at once after a run that had
settled, longer waits while a service keeps failing soon after its start, a give-up on a crash loop,
a clean slate after a quiet spell."""

from sluice_cli.restart_policy import GiveUp, Restart, RestartPolicy, decide, recent

POLICY = RestartPolicy(backoff_s=(0.0, 1.0, 2.0, 4.0), stable_s=10.0, crash_loop_crashes=5, window_s=60.0)


class Service:
    """A service on a fake clock: its crash times as the supervisor keeps them, and when it last
    started."""

    def __init__(self) -> None:
        self.crashes_s: list[float] = []
        self.started_s = 0.0

    def crash(self, at_s: float) -> Restart | GiveUp:
        self.crashes_s = recent([*self.crashes_s, at_s], at_s, POLICY.window_s)
        decision = decide(POLICY, self.crashes_s, at_s, ran_s=at_s - self.started_s)
        if isinstance(decision, Restart):
            self.started_s = at_s + decision.delay_s
        return decision


def test_a_crash_after_a_settled_run_restarts_at_once() -> None:
    assert Service().crash(at_s=1000.0) == Restart(0.0)


def test_a_first_crash_restarts_at_once_however_short_the_run() -> None:
    assert Service().crash(at_s=1.0) == Restart(0.0)


def test_failing_soon_after_each_start_backs_off_then_gives_up() -> None:
    service = Service()
    clock_s = 500.0
    delays = []
    for _ in range(4):
        decision = service.crash(clock_s)
        assert isinstance(decision, Restart)
        delays.append(decision.delay_s)
        clock_s = service.started_s + 1.5  # every restart fails 1.5 s after it starts
    assert delays == [0.0, 1.0, 2.0, 4.0]
    assert service.crash(clock_s) == GiveUp("it crashed 5 times within 60 s")


def test_settled_runs_restart_at_once_but_five_crashes_a_minute_are_a_loop() -> None:
    service = Service()
    for at_s in (100.0, 112.0, 124.0, 136.0):  # each run lasted 12 s
        assert service.crash(at_s) == Restart(0.0)
    assert service.crash(148.0) == GiveUp("it crashed 5 times within 60 s")


def test_the_longest_delay_repeats() -> None:
    policy = RestartPolicy(backoff_s=(0.0, 3.0), crash_loop_crashes=10, window_s=60.0)
    assert decide(policy, [0.0, 1.0, 2.0, 3.0], 3.0, ran_s=1.0) == Restart(3.0)


def test_crashes_spread_wider_than_the_window_never_give_up() -> None:
    service = Service()
    for index in range(20):
        # Every 61 s: each crash is the only one of its window.
        assert service.crash(index * 61.0) == Restart(0.0)


def test_a_quiet_spell_resets_the_backoff() -> None:
    service = Service()
    for at_s in (0.0, 2.0, 5.0):
        service.crash(at_s)
    assert service.crash(10.0) == Restart(4.0)
    assert service.crash(100.0) == Restart(0.0)  # the crashes at 0-10 s no longer count


def test_recent_keeps_what_is_inside_the_window() -> None:
    assert recent([0.0, 10.0, 50.0, 69.0], 70.0, 60.0) == [50.0, 69.0]
