"""A simulated clock for the unit tier: seconds, as ``time.time`` gives them, that move only when a
test says so."""


class SimClock:
    def __init__(self, start_s: float = 1_700_000_000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds
