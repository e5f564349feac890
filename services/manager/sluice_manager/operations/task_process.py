"""The manager's Celery worker as a child process: started with the manager, restarted (with a short
backoff) if it exits, stopped with it (SIGTERM: Celery's warm shutdown finishes the running tasks and
puts unacknowledged messages back; SIGKILL after ``stop_timeout_s``).

It runs in its own process group, so stopping it reaches its prefork children too, and it asks the
kernel to SIGKILL it when the manager dies (``PR_SET_PDEATHSIG``): a manager killed with -9 leaves
no task runner behind; its operations are resubmitted by the next manager.
"""

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from sluice.lifecycle.backoff import Backoff
from sluice.log import get_logger

log = get_logger(__name__)

PR_SET_PDEATHSIG = 1
# Environment variable naming the parent the task worker must die with.
PARENT_PID_ENV = "SLUICE_TASK_WORKER_PARENT_PID"
_MAX_RESTART_DELAY_S = 10.0


def die_with_parent(environ: Mapping[str, str]) -> None:
    """Called first thing in the task worker: SIGKILL me when my parent dies; exit at once if it
    already has (it died between spawning me and this call)."""
    expected = environ.get(PARENT_PID_ENV)
    if not expected:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(expected):
        os._exit(1)


class TaskWorkerProcess:
    def __init__(
        self, *, command: list[str], env: Mapping[str, str], log_path: Path, stop_timeout_s: float
    ) -> None:
        self._command = command
        self._env = {**env, PARENT_PID_ENV: str(os.getpid())}
        self._log_path = log_path
        self._stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Spawn it (from the event loop's thread: the parent-death signal is tied to the thread that
        forks) and keep it running."""
        self._spawn()
        self._watcher = asyncio.create_task(self._watch(), name="task-worker-watch")

    def _spawn(self) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log_file:
            self._process = subprocess.Popen(
                self._command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        log.info("control-plane task worker started", pid=self._process.pid, log_file=str(self._log_path))

    async def _watch(self) -> None:
        backoff = Backoff(first_s=0.5, cap_s=_MAX_RESTART_DELAY_S)
        while not self._stopping:
            await asyncio.sleep(0.2)
            process = self._process
            if process is None or process.poll() is None or self._stopping:
                continue
            delay_s = backoff.next_delay_s()
            log.warning("control-plane task worker exited; restarting it", exit_code=process.returncode,
                        delay_s=delay_s, log_file=str(self._log_path))  # fmt: skip
            await asyncio.sleep(delay_s)
            if not self._stopping:
                self._spawn()

    async def stop(self) -> None:
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        process = self._process
        if process is None or process.poll() is not None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, self._stop_timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("control-plane task worker did not stop in time; killing it", pid=process.pid)
            _signal_group(process.pid, signal.SIGKILL)
            await asyncio.to_thread(process.wait, 5.0)
        log.info("control-plane task worker stopped", exit_code=process.returncode)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
