"""The ``process`` launcher: each worker is a local subprocess in its own process group (session), so
Ctrl-C on the terminal reaches only the CLI and a stop signal reaches the worker and its children.

Workers survive a manager crash; their pid and start time are kept in Redis (LaunchRecord) so the next
manager adopts them instead of starting duplicates. One watch loop notices exits, of our children
(reaped with ``poll``) and of adopted processes (not our children: checked by pid and start time).

With a ``standby_command``, one worker process is kept started ahead (``--standby``, see
:mod:`sluice.worker_standby`): a new worker is that process, assigned its model version through its
stdin, and skips the imports that are most of a worker's start. The next standby starts a moment
later, so that its imports do not compete with the worker that is loading its model. A standby that
exits before it is needed turns standbys off (with a warning) instead of restarting in a loop.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
from sluice.log import get_logger
from sluice.worker_standby import STANDBY_FLAG, Assignment

from sluice_manager.supervision.launchers.legacy_base import (
    ExitHandler,
    LaunchRecord,
    ProcessState,
    WorkerSpec,
)
from sluice_manager.waiting import finish

log = get_logger(__name__)

# How far a process's start time may differ from the recorded one and still be the same process.
_START_TIME_TOLERANCE_S = 1.0
# Pause between handing the standby out and starting the next one.
STANDBY_REPLENISH_DELAY_S = 1.0
_STANDBY_STOP_TIMEOUT_S = 5.0


@dataclass
class _Child:
    record: LaunchRecord
    popen: "subprocess.Popen[bytes] | None" = None
    exited: bool = False
    exit_code: int | None = None


def find_process(pid: int, start_time: float | None, marker: str) -> psutil.Process | None:
    """The live process ``pid`` if it is the one that was recorded (same start time, ``marker`` in its
    command line); None if it is gone, a zombie, or the pid now belongs to someone else."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if start_time is not None and abs(process.create_time() - start_time) > _START_TIME_TOLERANCE_S:
            return None
        if marker not in process.cmdline():
            return None
        return process
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


class ProcessLauncher:
    name = "process"
    can_start = True

    def __init__(
        self,
        *,
        command: Callable[[WorkerSpec], list[str]],
        env: Mapping[str, str],
        logs_dir: Path,
        host: str,
        on_exit: ExitHandler,
        poll_interval_s: float = 0.1,
        standby_command: list[str] | None = None,
        standby_delay_s: float = STANDBY_REPLENISH_DELAY_S,
    ) -> None:
        self._command = command
        self._env = dict(env)
        self._logs_dir = logs_dir
        self._host = host
        self._on_exit = on_exit
        self._poll_interval_s = poll_interval_s
        self._children: dict[str, _Child] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False
        self._standby_command = standby_command
        self._standby_delay_s = standby_delay_s
        self._standby: subprocess.Popen[bytes] | None = None
        # Taking the standby and starting the next one happen on worker threads.
        self._standby_lock = threading.Lock()
        self._replenish: asyncio.Task[None] | None = None

    @property
    def standby_log(self) -> Path:
        return self._logs_dir / "workers" / "standby.log"

    async def prepare(self) -> None:
        await asyncio.to_thread(self._ensure_standby)

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        log_path = self._logs_dir / "workers" / f"{spec.model_name}-{spec.version}-{spec.worker_id}.log"
        popen, marker = await asyncio.to_thread(self._launch, spec, log_path)
        if self._standby_command is not None:
            self._replenish_later()
        record = LaunchRecord(
            worker_id=spec.worker_id,
            model_name=spec.model_name,
            version=spec.version,
            launcher=self.name,
            host=self._host,
            pid=popen.pid,
            process_start_time=_start_time(popen.pid),
            started_unix_ms=int(time.time() * 1000),
            log_path=str(log_path),
            marker=marker,
        )
        self._children[spec.worker_id] = _Child(record=record, popen=popen)
        self._ensure_watcher()
        log.info("worker started", model=spec.model_name, version=spec.version, worker=spec.worker_id,
                 pid=popen.pid, log_file=str(log_path), standby=bool(marker))  # fmt: skip
        return record

    def _launch(self, spec: WorkerSpec, log_path: Path) -> "tuple[subprocess.Popen[bytes], str]":
        """The worker's process and the marker of its command line ("" for its worker id)."""
        standby = self._take_standby()
        if standby is not None:
            assert standby.stdin is not None
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.touch()  # there from the start, as a spawned worker's (the standby appends)
            try:
                standby.stdin.write(Assignment(spec.arguments(), str(log_path)).to_line())
                standby.stdin.close()
                return standby, STANDBY_FLAG
            except OSError as exc:  # it exited since we looked
                log.warning("standby worker lost; starting the worker from scratch", error=str(exc))
        return self._spawn(self._command(spec), log_path, stdin=subprocess.DEVNULL), ""

    def _spawn(self, argv: list[str], log_path: Path, *, stdin: int) -> "subprocess.Popen[bytes]":
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            return subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )

    # Standby ---------------------------------------------------------------------------------------
    def _take_standby(self) -> "subprocess.Popen[bytes] | None":
        with self._standby_lock:
            standby, self._standby = self._standby, None
            if standby is None or standby.poll() is None:
                return standby
            # It could not even import the worker: say so once, then start workers the plain way.
            self._standby_command = None
        log.warning("standby worker exited before it was needed; standbys are off",
                    exit_code=standby.returncode, log_file=str(self.standby_log))  # fmt: skip
        return None

    def _ensure_standby(self) -> None:
        with self._standby_lock:
            if self._standby_command is None or self._closing or self._standby is not None:
                return
            try:
                self._standby = self._spawn(self._standby_command, self.standby_log, stdin=subprocess.PIPE)
                return
            except OSError as exc:  # workers then start the plain way (and report what is wrong)
                self._standby_command = None
                error = exc
        log.warning("cannot start a standby worker; standbys are off", error=str(error))

    def _replenish_later(self) -> None:
        if self._replenish is None or self._replenish.done():
            self._replenish = asyncio.create_task(self._replenish_after_delay(), name="standby-replenish")

    async def _replenish_after_delay(self) -> None:
        await asyncio.sleep(self._standby_delay_s)
        await asyncio.to_thread(self._ensure_standby)

    def _end_standby(self) -> None:
        """Stop the standby (it holds no work: the default SIGTERM ends it at once)."""
        with self._standby_lock:
            standby, self._standby = self._standby, None
        if standby is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(standby.pid, signal.SIGTERM)
        try:
            standby.wait(timeout=_STANDBY_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            standby.kill()
            standby.wait()
        if standby.stdin is not None:
            standby.stdin.close()

    def adopt(self, record: LaunchRecord) -> bool:
        if record.pid is None or record.host != self._host or record.worker_id in self._children:
            return False
        if find_process(record.pid, record.process_start_time, record.command_marker) is None:
            return False
        self._children[record.worker_id] = _Child(record=record)
        self._ensure_watcher()
        log.info("worker adopted", model=record.model_name, version=record.version, worker=record.worker_id,
                 pid=record.pid)  # fmt: skip
        return True

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        child = self._children.get(worker_id)
        if child is None or child.exited or child.record.pid is None:
            return
        pid = child.record.pid
        if (
            child.popen is None
            and find_process(pid, child.record.process_start_time, child.record.command_marker) is None
        ):
            return
        # Our workers lead their own process group (start_new_session): signal the whole group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM if graceful else signal.SIGKILL)

    def list(self) -> dict[str, ProcessState]:
        return {
            worker_id: ProcessState.EXITED if child.exited else ProcessState.RUNNING
            for worker_id, child in self._children.items()
        }

    def record(self, worker_id: str) -> LaunchRecord | None:
        child = self._children.get(worker_id)
        return None if child is None else child.record

    def forget(self, worker_id: str) -> None:
        child = self._children.get(worker_id)
        if child is not None and child.exited:
            del self._children[worker_id]

    async def aclose(self) -> None:
        """Stop watching (the workers keep running). The watch loop is asked to end rather than
        cancelled: it may be inside an exit handler's Redis calls (see sluice_manager.waiting)."""
        self._closing = True
        if self._replenish is not None:
            await finish(self._replenish, timeout_s=5.0, cancel_first=True)
            self._replenish = None
        await asyncio.to_thread(self._end_standby)
        if self._watcher is not None:
            await finish(self._watcher, timeout_s=2 * self._poll_interval_s + 5.0)
            self._watcher = None

    def _ensure_watcher(self) -> None:
        self._closing = False
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="process-launcher-watch")

    async def _watch(self) -> None:
        while not self._closing:
            for worker_id, child in list(self._children.items()):
                if not child.exited and self._has_exited(child):
                    child.exited = True
                    await self._report_exit(worker_id, child.exit_code)
            await asyncio.sleep(self._poll_interval_s)

    def _has_exited(self, child: _Child) -> bool:
        if child.popen is not None:
            child.exit_code = child.popen.poll()
            return child.exit_code is not None
        pid = child.record.pid
        return (
            pid is None
            or find_process(pid, child.record.process_start_time, child.record.command_marker) is None
        )

    async def _report_exit(self, worker_id: str, exit_code: int | None) -> None:
        try:
            await self._on_exit(worker_id, exit_code)
        except Exception:
            log.exception("worker exit handler failed", worker=worker_id)


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def worker_command(python: str, module: str) -> Callable[[WorkerSpec], list[str]]:
    """``<python> -m <module> <worker arguments>``: how the process launcher starts a worker."""

    def build(spec: WorkerSpec) -> list[str]:
        return [python, "-m", module, *spec.arguments()]

    return build
