"""Exponential backoff for the retry loops of every service (Redis outages, a child process that
keeps exiting): each delay doubles, from ``first_s`` up to ``cap_s``.

With ``jitter`` each delay is drawn from the upper half of its step (``[d / 2, d]``), so that the
gateways and workers that lost Redis together do not all retry at the same instant.
"""

import random
from collections.abc import Callable


class Backoff:
    def __init__(
        self,
        first_s: float = 0.1,
        cap_s: float = 2.0,
        *,
        jitter: bool = False,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self._first_s = first_s
        self._cap_s = cap_s
        self._jitter = jitter
        self._uniform = uniform
        self._step_s = min(first_s, cap_s)

    def next_delay_s(self) -> float:
        """The delay to wait before the next attempt."""
        step_s = self._step_s
        self._step_s = min(step_s * 2, self._cap_s)
        return self._uniform(step_s / 2, step_s) if self._jitter else step_s

    def reset(self) -> None:
        """Start again from ``first_s`` (after a success)."""
        self._step_s = min(self._first_s, self._cap_s)
