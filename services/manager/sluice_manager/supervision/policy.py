"""The reconcile decision, as pure functions: (desired, observed workers, timing) -> actions.

A version runs the number of workers the autoscaler wants (sluice_manager.supervision.autoscale:
``min_workers`` unless ``max_workers`` allows more and the load asks for them). A worker that dies
is restarted with TorchServe's backoff (0, 1, 1, 2, 3, 5, 8, ... s; Sluice caps each delay at the
version's ``max_retry_timeout_s``). The reconciler (I/O) observes and applies.
"""

import enum
from dataclasses import dataclass

from sluice_manager.supervision.launchers.base import RunState

# TorchServe's WorkerThread.BACK_OFF, in seconds.
BACKOFF_S = (0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597)


class Phase(enum.StrEnum):
    """What a worker announced about itself in the version's ``workers`` hash."""

    NONE = "none"  # no record yet: still loading its handler
    STARTING = "starting"
    READY = "ready"
    UNLOADING = "unloading"


@dataclass(frozen=True)
class ObservedWorker:
    worker_id: str
    # Run (started or adopted) by this manager's launcher: it can be signalled.
    owned: bool
    # What the launcher says of it (None: not one of the launcher's).
    state: RunState | None
    phase: Phase
    heartbeat: bool
    # It announced READY at some point of this launch. Peers delete the record of a worker whose
    # heartbeat lapsed, so the phase alone cannot tell a hung worker from one still loading.
    was_ready: bool = False
    # For how long the heartbeat key has been seen missing (0 while it exists).
    heartbeat_missing_s: float = 0.0
    # Since launch (owned) or since the worker's own start time (not owned).
    age_s: float = 0.0
    # Since we asked it to stop; None if we did not.
    stopping_s: float | None = None
    # It holds unacknowledged jobs.
    busy: bool = False


@dataclass(frozen=True)
class Desired:
    # Workers the version should run now.
    workers: int
    startup_timeout_s: float
    # False once the version is unregistered (or being removed): every worker goes.
    active: bool = True
    # The version's own stop timeout (ScaleWorker's `timeout`; 0: at once); None: Timing's.
    stop_timeout_s: float | None = None


@dataclass(frozen=True)
class Timing:
    # A READY worker without heartbeat for this long is hung (or dead) even if its process runs.
    heartbeat_grace_s: float
    # A worker asked to stop that still runs after this long is killed.
    stop_timeout_s: float


@dataclass(frozen=True)
class Actions:
    start: int = 0
    # Graceful (SIGTERM: finish the batch in hand, then exit).
    stop: tuple[str, ...] = ()
    # SIGKILL: hung, past its startup timeout, or past its stop timeout.
    kill: tuple[str, ...] = ()
    # Gone: drop its launch record, worker record and heartbeat.
    forget: tuple[str, ...] = ()
    # Starting was due but held back by the restart backoff.
    backing_off: bool = False


def restart_delay_s(failures: int, cap_s: float) -> float:
    """Delay before the next start after ``failures`` consecutive failures (0 for none)."""
    if failures <= 0:
        return 0.0
    return float(min(BACKOFF_S[min(failures - 1, len(BACKOFF_S) - 1)], cap_s))


def decide(
    desired: Desired, workers: list[ObservedWorker], timing: Timing, backoff_wait_s: float = 0.0
) -> Actions:
    """Actions that move one model version toward ``desired``. ``backoff_wait_s`` is the time left
    before the restart backoff allows a start (0: now)."""
    sorted_workers = sorted(workers, key=lambda w: w.worker_id)
    kill: list[str] = []
    forget: list[str] = []
    counted: list[ObservedWorker] = []
    for worker in sorted_workers:
        verdict = _classify(worker, desired, timing)
        if verdict is _Verdict.FORGET:
            forget.append(worker.worker_id)
        elif verdict is _Verdict.KILL:
            kill.append(worker.worker_id)
        elif verdict is _Verdict.COUNT:
            counted.append(worker)
    if not desired.active:
        stop = tuple(w.worker_id for w in counted if w.owned)
        return Actions(stop=stop, kill=tuple(kill), forget=tuple(forget))
    start, stop, backing_off = 0, (), False
    if len(counted) < desired.workers:
        if backoff_wait_s > 0:
            backing_off = True
        else:
            start = desired.workers - len(counted)
    elif len(counted) > desired.workers:
        stop = _scale_down_victims(counted, len(counted) - desired.workers)
    return Actions(start=start, stop=stop, kill=tuple(kill), forget=tuple(forget), backing_off=backing_off)


class _Verdict(enum.Enum):
    COUNT = "count"  # alive (READY or still loading): counts toward the desired number
    IGNORE = "ignore"  # leaving (stopping, unloading): neither counted nor acted on
    KILL = "kill"
    FORGET = "forget"


def _classify(worker: ObservedWorker, desired: Desired, timing: Timing) -> _Verdict:
    if not worker.owned:
        return _classify_unowned(worker, desired, timing)
    if worker.state is RunState.EXITED:
        return _Verdict.FORGET
    if worker.stopping_s is not None:
        limit_s = timing.stop_timeout_s if desired.stop_timeout_s is None else desired.stop_timeout_s
        return _Verdict.KILL if worker.stopping_s >= limit_s else _Verdict.IGNORE
    if worker.phase is Phase.UNLOADING:
        return _Verdict.IGNORE
    if worker.phase is Phase.READY or worker.was_ready:
        hung = not worker.heartbeat and worker.heartbeat_missing_s >= timing.heartbeat_grace_s
        return _Verdict.KILL if hung else _Verdict.COUNT
    # Still loading its handler.
    return _Verdict.KILL if worker.age_s >= desired.startup_timeout_s else _Verdict.COUNT


def _classify_unowned(worker: ObservedWorker, desired: Desired, timing: Timing) -> _Verdict:
    """A worker we cannot signal: we see only its records; clean them up once it is clearly gone."""
    if worker.heartbeat:
        return _Verdict.IGNORE if worker.phase is Phase.UNLOADING else _Verdict.COUNT
    if worker.phase is Phase.READY or worker.phase is Phase.UNLOADING:
        gone = worker.heartbeat_missing_s >= timing.heartbeat_grace_s
    else:
        gone = worker.age_s >= desired.startup_timeout_s + timing.heartbeat_grace_s
    if gone:
        return _Verdict.FORGET
    return _Verdict.IGNORE if worker.phase is Phase.UNLOADING else _Verdict.COUNT


def _scale_down_victims(counted: list[ObservedWorker], excess: int) -> tuple[str, ...]:
    """Which workers go when there are too many: those still loading first, then idle ones, then
    busy ones; newest first within each group (ids grow with time). Only our own can be stopped."""
    owned = [w for w in counted if w.owned]

    def rank(worker: ObservedWorker) -> tuple[int, int, str]:
        group = 0 if worker.phase is not Phase.READY else (2 if worker.busy else 1)
        return group, -_numeric(worker.worker_id), worker.worker_id

    return tuple(w.worker_id for w in sorted(owned, key=rank)[:excess])


def _numeric(worker_id: str) -> int:
    return int(worker_id) if worker_id.isdigit() else 0
