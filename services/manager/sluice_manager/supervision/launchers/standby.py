"""The process launcher's standby worker: one ``python -m sluice_worker --standby`` process that
imported torch and ``ts`` ahead of time and waits on its stdin (:mod:`sluice.lifecycle.worker_standby`).
Starting a worker hands it its arguments and log file, so the worker skips the ~1 s of imports that
were most of its start. The next standby starts a moment later, so that its imports do not compete
with the worker loading its model. A standby that exits unused turns standbys off with a warning
instead of restarting in a loop; one whose manager died sees end of file on stdin and exits.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from sluice.lifecycle.worker_standby import STANDBY_FLAG, Assignment
from sluice.log import get_logger

from sluice_manager.supervision.launchers import local_process

log = get_logger(__name__)

# Pause between handing the standby out and starting the next one.
REPLENISH_DELAY_S = 1.0
_STOP_TIMEOUT_S = 5.0


class Standby:
    # The word of a standby-born worker's command line that marks it as ours.
    marker = STANDBY_FLAG

    def __init__(
        self,
        command: list[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        delay_s: float = REPLENISH_DELAY_S,
    ) -> None:
        self._command: list[str] | None = command
        self._env = dict(env)
        self._log_path = log_path
        self._delay_s = delay_s
        self._process: subprocess.Popen[bytes] | None = None
        # Taking the standby happens on a worker thread, starting the next one too.
        self._lock = threading.Lock()
        self._replenish: asyncio.Task[None] | None = None
        self._closing = False

    async def prepare(self) -> None:
        await asyncio.to_thread(self._ensure)

    def assign(self, arguments: list[str], log_path: Path) -> "subprocess.Popen[bytes] | None":
        """Turn the standby into the worker ``arguments`` describe (logging to ``log_path``); None when
        there is no standby to take (start the worker from scratch)."""
        process = self._take()
        if process is None:
            return None
        assert process.stdin is not None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()  # there from the start, as a spawned worker's (the standby appends)
        try:
            process.stdin.write(Assignment(arguments, str(log_path)).to_line())
            process.stdin.close()
            return process
        except OSError as exc:  # it exited since we looked
            log.warning("standby worker lost; starting the worker from scratch", error=str(exc))
            return None

    def replenish_later(self) -> None:
        """Start the next standby after the delay (call from the event loop, after :meth:`assign`)."""
        if self._replenish is None or self._replenish.done():
            self._replenish = asyncio.create_task(self._replenish_after_delay(), name="standby-replenish")

    async def aclose(self) -> None:
        self._closing = True
        if self._replenish is not None:
            self._replenish.cancel()
            await asyncio.wait([self._replenish], timeout=5.0)
            self._replenish = None
        await asyncio.to_thread(self._end)

    def _take(self) -> "subprocess.Popen[bytes] | None":
        with self._lock:
            process, self._process = self._process, None
            if process is None or process.poll() is None:
                return process
            # It could not even import the worker: say so once, then start workers the plain way.
            self._command = None
        log.warning("standby worker exited before it was needed; standbys are off",
                    exit_code=process.returncode, log_file=str(self._log_path))  # fmt: skip
        return None

    def _ensure(self) -> None:
        with self._lock:
            if self._command is None or self._closing or self._process is not None:
                return
            try:
                self._process = local_process.spawn(
                    self._command, self._log_path, self._env, stdin=subprocess.PIPE
                )
                return
            except OSError as exc:  # workers then start the plain way (and report what is wrong)
                self._command = None
                error = exc
        log.warning("cannot start a standby worker; standbys are off", error=str(error))

    async def _replenish_after_delay(self) -> None:
        await asyncio.sleep(self._delay_s)
        await asyncio.to_thread(self._ensure)

    def _end(self) -> None:
        """Stop the standby (it holds no work: the default SIGTERM ends it at once)."""
        with self._lock:
            process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdin is not None:
            process.stdin.close()
