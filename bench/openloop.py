"""An open-loop load generator: requests go out at their scheduled times whatever the answers (a
fixed arrival rate per phase, evenly spaced), so a slow server faces a growing backlog instead of a
politely waiting client. A call's latency counts from its scheduled time (a late send counts
against the server's answer, not hidden by it), until its answer or its error; errors, timeouts
included, are kept with their labels. Bounded by the schedule's length and by the calls' timeout.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.loadgen import classify

GRACE_S = 1.0


@dataclass(frozen=True)
class Phase:
    """``rate_per_s`` requests per second, evenly spaced, for ``duration_s``."""

    label: str
    rate_per_s: float
    duration_s: float


@dataclass(frozen=True)
class Call:
    """One scheduled request: seconds from the load's start."""

    scheduled_s: float
    sent_s: float
    ended_s: float
    # None: answered; else the error's label (a gRPC status name, TIMEOUT, ...).
    error: str | None

    @property
    def latency_s(self) -> float:
        """From the scheduled send until the answer or the error."""
        return self.ended_s - self.scheduled_s


def schedule(phases: Sequence[Phase]) -> list[float]:
    """Send times (seconds from the start) of every request of ``phases``, in order."""
    times: list[float] = []
    start = 0.0
    for phase in phases:
        count = round(phase.rate_per_s * phase.duration_s)
        times.extend(start + index / phase.rate_per_s for index in range(count))
        start += phase.duration_s
    return times


def phase_bounds(phases: Sequence[Phase]) -> list[tuple[str, float, float]]:
    """(label, start s, end s) of each phase."""
    bounds = []
    start = 0.0
    for phase in phases:
        bounds.append((phase.label, start, start + phase.duration_s))
        start += phase.duration_s
    return bounds


async def open_loop(
    call: Callable[[], Awaitable[Any]],
    send_times: Sequence[float],
    *,
    call_timeout_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, list[Call]]:
    """Start ``call()`` at each of ``send_times`` (seconds from now) without waiting for earlier
    answers. Returns (the start on ``clock``, every call in schedule order). ``call`` must end
    within ``call_timeout_s`` (its own deadline); the calls still running ``GRACE_S`` past that
    after the last send are cancelled and count as TIMEOUT."""
    start = clock()
    calls: list[Call | None] = [None] * len(send_times)

    async def one(index: int, scheduled: float) -> None:
        sent = clock() - start
        error: str | None = None
        try:
            await call()
        except asyncio.CancelledError:
            error = "TIMEOUT"
        except Exception as exc:
            error = classify(exc)
        calls[index] = Call(scheduled, sent, clock() - start, error)

    tasks = []
    for index, scheduled in enumerate(send_times):
        delay = start + scheduled - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(index, scheduled)))
    if tasks:
        _done, pending = await asyncio.wait(tasks, timeout=call_timeout_s + GRACE_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return start, [c for c in calls if c is not None]
