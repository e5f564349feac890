"""The supervision loop of ``sluice start``: runs the services of a plan, restarts a crashed one as the
restart policy says, gives up on a crash loop, rotates the logs and keeps the pid file current.

The same loop runs in the foreground CLI and in the detached supervisor of a background start; only
what a give-up does differs (the foreground CLI stops everything and exits 1, the detached supervisor
records it and goes on supervising the rest). Each service is its own session's leader, so a Ctrl-C
on the terminal reaches only this process, which then stops them in order.
"""

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from sluice.log import get_logger

from sluice_cli.children import Children, exit_description
from sluice_cli.log_rotation import RotationLimits, rotate_large, watched_logs
from sluice_cli.outcome import Failure, GaveUp, Interrupted, ModelStatus, StartFailed
from sluice_cli.plan import ServiceSpec, SupervisorPlan
from sluice_cli.restart_policy import GiveUp, RestartPolicy, decide, recent
from sluice_cli.runtime import PidFile, ProcessRef, remove_pid_file
from sluice_cli.stop import stop_all

log = get_logger(__name__)

# How often the loop looks at its children: a crash is seen within this (the 3 s recovery target).
POLL_S = 0.1
ROTATION_INTERVAL_S = 1.0
REDIS_START_TIMEOUT_S = 10.0
DEFAULT_POLICY = RestartPolicy()
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Supervisor:
    def __init__(
        self,
        plan: SupervisorPlan,
        *,
        stop_on_give_up: bool,
        policy: RestartPolicy = DEFAULT_POLICY,
        notify: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.plan = plan
        self.runtime = plan.runtime
        self.children = Children()
        self._stop_on_give_up = stop_on_give_up
        self._policy = policy
        self._notify = notify
        self._specs = {spec.name: spec for spec in plan.services}
        self._crashes: dict[str, list[float]] = {}
        # Service name -> when (time.monotonic) its restart is due / it was last started.
        self._due: dict[str, float] = {}
        self._started_s: dict[str, float] = {}
        self._limits = RotationLimits(plan.log_max_bytes, plan.log_backups)
        self._next_rotation_s = 0.0

    @property
    def state(self) -> PidFile:
        return self.plan.state

    def launch(self, supervisor: ProcessRef) -> None:
        """Record ``supervisor`` (this process) in the pid file, then start every service."""
        self.state.supervisor = supervisor
        self._write()
        for spec in self.plan.services:
            with _signals_deferred():
                try:
                    ref = self._spawn(spec)
                except OSError as exc:
                    raise StartFailed(f"could not run {spec.argv[0]}: {exc.strerror}") from None
                self.state.processes.append(ref)
                # Written after each service, so that `sluice stop` can clean up a half-done start.
                self._write()

    def wait_until_serving(self) -> list[ModelStatus]:
        """Wait until Redis answers, the gateway serves and the startup models are READY; a service
        that exits meanwhile fails the start (no restarts before Sluice first served)."""
        # Imported once the services run: grpc and redis take a good part of the CLI's own start.
        from sluice.redis.client import connect_sync

        from sluice_cli.readiness import wait_until_ready

        if self.state.private_redis:
            self._wait_for_redis()
        manager = self.state.get("manager")
        assert manager is not None
        client = connect_sync(self.state.redis_url, timeout_s=2.0)
        try:
            return wait_until_ready(
                client,
                gateway_target=self.state.gateway_target,
                gateway_tls=self.state.gateway_tls,
                manager_pid=manager.pid,
                logs_dir=self.runtime.logs,
                timeout_s=self.plan.ready_timeout_s,
                check_children=self.check_started,
            )
        finally:
            client.close()

    def check_started(self) -> None:
        for ref in self.state.processes:
            if not self.children.running(ref):
                code = self.children.exit_code(ref)
                raise StartFailed(f"the {ref.name} {exit_description(code)}", [Path(ref.log_file)])

    def _wait_for_redis(self) -> None:
        import redis
        from sluice.redis.client import connect_sync

        client = connect_sync(self.state.redis_url, timeout_s=0.5)
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                self.check_started()
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    time.sleep(0.05)
        finally:
            client.close()
        ref = self.state.get("redis")
        raise StartFailed("redis-server did not answer", [Path(ref.log_file)] if ref else [])

    def run(self) -> None:
        """Supervise until a signal handler raises Interrupted (or a give-up raises GaveUp)."""
        while True:
            try:
                self.step()
            except (Failure, Interrupted):
                raise
            except Exception:
                # A bug or a full disk must not end the supervision of services that still run.
                log.exception("supervision step failed")
                time.sleep(1.0)
            time.sleep(POLL_S)

    def step(self) -> None:
        """One look: note crashes, start what is due, rotate the logs when it is time."""
        now_s = time.monotonic()
        for ref in list(self.state.processes):
            if ref.name in self._due or self.state.history_of(ref.name).given_up:
                continue
            if not self.children.running(ref):
                self._crashed(ref.name, self.children.exit_code(ref), Path(ref.log_file), now_s)
        for name, due_s in list(self._due.items()):
            if now_s >= due_s:
                self._restart(name, now_s)
        if now_s >= self._next_rotation_s:
            self._next_rotation_s = now_s + ROTATION_INTERVAL_S
            for path in rotate_large(watched_logs(self.runtime.logs), self._limits):
                log.info("log rotated", log_file=str(path), max_bytes=self._limits.max_bytes)

    def _crashed(self, name: str, code: int | None, log_file: Path, now_s: float) -> None:
        history = self.state.history_of(name)
        history.last_exit_code = code
        history.last_exit_unix_ms = int(time.time() * 1000)
        crashes = recent([*self._crashes.get(name, []), now_s], now_s, self._policy.window_s)
        self._crashes[name] = crashes
        decision = decide(self._policy, crashes, now_s, ran_s=now_s - self._started_s.get(name, now_s))
        what = f"the {name} {exit_description(code)}"
        if isinstance(decision, GiveUp):
            history.given_up = decision.reason
            self._write()
            log.error("service given up", service=name, exit_code=code, reason=decision.reason,
                      log_file=str(log_file))  # fmt: skip
            message = f"{what}; not restarting it: {decision.reason}"
            if self._stop_on_give_up:
                raise GaveUp(message, [log_file])
            self._notify(message)
            return
        self._due[name] = now_s + decision.delay_s
        self._write()
        log.warning("service exited; restarting it", service=name, exit_code=code,
                    restart_in_s=decision.delay_s)  # fmt: skip
        self._notify(f"{what}; restarting it" + (f" in {decision.delay_s:g} s" if decision.delay_s else ""))

    def _restart(self, name: str, now_s: float) -> None:
        del self._due[name]
        old = self.state.get(name)
        assert old is not None
        with _signals_deferred():
            try:
                ref = self._spawn(self._specs[name])
            except OSError as exc:
                log.error("service could not be started", service=name, error=exc.strerror)
                self._crashed(name, None, Path(old.log_file), now_s)
                return
            self.children.forget(old.pid)
            self.state.replace(ref)
            history = self.state.history_of(name)
            history.restarts += 1
            self._write()
        log.info("service restarted", service=name, pid=ref.pid, restarts=history.restarts)

    def stop(self) -> None:
        """Stop every service in reverse order and remove the pid file. Not cut short by a second
        Ctrl-C or SIGTERM: every wait in it is bounded."""
        # Ignored only meanwhile: a process started later would inherit SIG_IGN through exec.
        previous = {number: signal.signal(number, signal.SIG_IGN) for number in _STOP_SIGNALS}
        try:
            stop_all(self.state, self.plan.worker_stop_timeout_s, self.children)
            remove_pid_file(self.runtime.pid_file)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _spawn(self, spec: ServiceSpec) -> ProcessRef:
        self._started_s[spec.name] = time.monotonic()
        return self.children.spawn(
            spec.name,
            spec.argv,
            env=self.plan.env,
            log_file=self.runtime.log_file(spec.name),
            marker=spec.marker,
        )

    def _write(self) -> None:
        self.state.write(self.runtime.pid_file)


def interrupt_on_signals() -> None:
    """SIGTERM (``sluice stop``) and SIGINT (Ctrl-C) raise :class:`Interrupted`."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


@dataclass
class _Deferral:
    active: bool = False
    pending: bool = False


_deferral = _Deferral()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _deferral.active:
        _deferral.pending = True
        return
    raise Interrupted()


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold a stop back while a service is started and recorded: one that interrupted in between
    would leave a process the pid file does not list. (Not by blocking the signals: a child inherits
    the signal mask, and would then ignore the SIGTERM that stops it.)"""
    _deferral.active = True
    try:
        yield
    finally:
        _deferral.active = False
        if _deferral.pending:
            _deferral.pending = False
            raise Interrupted()
