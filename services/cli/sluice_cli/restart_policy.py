"""When a crashed service is started again, and when it is given up: a pure function of its recent
crash times and of how long its last run lasted, so that a fake clock can test it.

A run that lasted ``stable_s`` or more is restarted at once (the 3 s recovery target leaves no room
for a delay); one that crashed sooner waits longer the more crashes came within ``window_s`` (a
service that cannot start should not spin); ``crash_loop_crashes`` crashes within ``window_s`` mean
the service cannot run here (its port taken, its config broken) and restarting it again would only
fill its log.
"""

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    # Delay before the restart that follows the 1st, 2nd, ... crash within the window of a run that
    # did not last stable_s (the last one repeats).
    backoff_s: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0)
    stable_s: float = 10.0
    crash_loop_crashes: int = 5
    window_s: float = 60.0


@dataclass(frozen=True)
class Restart:
    delay_s: float


@dataclass(frozen=True)
class GiveUp:
    reason: str


def recent(crashes_s: Sequence[float], now_s: float, window_s: float) -> list[float]:
    """The crash times (monotonic seconds) that still count at ``now_s``."""
    return [at for at in crashes_s if now_s - at < window_s]


def decide(policy: RestartPolicy, crashes_s: Sequence[float], now_s: float, ran_s: float) -> Restart | GiveUp:
    """What to do about a service that crashed at ``now_s`` after running ``ran_s``; ``crashes_s``
    holds its earlier crash times and this one."""
    counted = recent(crashes_s, now_s, policy.window_s)
    if len(counted) >= policy.crash_loop_crashes:
        return GiveUp(f"it crashed {len(counted)} times within {policy.window_s:g} s")
    if ran_s >= policy.stable_s:
        return Restart(0.0)
    index = min(max(len(counted), 1), len(policy.backoff_s)) - 1
    return Restart(policy.backoff_s[index])
