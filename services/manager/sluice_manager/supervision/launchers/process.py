"""The ``process`` launcher: each worker is a local subprocess in its own process group (session), so
Ctrl-C on the terminal reaches only the CLI and a stop signal reaches the worker and its children.

Workers survive a manager crash: a record's ``handle`` is the pid, and its details hold the process's
start time and a word of its command line, so the next manager adopts the same process (never one
that merely reuses the pid) instead of starting a duplicate. One watch loop notices exits, of our
children (reaped with ``poll``) and of adopted processes (checked by pid and start time), and queues
them for :meth:`ProcessLauncher.exits`.

With a ``standby_command``, one worker process is kept started ahead (``--standby``, see
:mod:`sluice.lifecycle.worker_standby`): a new worker is that process, assigned its model version through its
stdin, and skips the imports that are most of a worker's start. The next standby starts a moment
later, so that its imports do not compete with the worker that is loading its model. A standby that
exits before it is needed turns standbys off (with a warning) instead of restarting in a loop.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from sluice.log import get_logger

from sluice_manager.supervision.launchers import local_process
from sluice_manager.supervision.launchers.base import (
    LOG_PATH,
    Capacity,
    LaunchRecord,
    RunState,
    Usage,
    WorkerExit,
    WorkerSpec,
)
from sluice_manager.supervision.launchers.standby import Standby
from sluice_manager.waiting import finish

log = get_logger(__name__)

NAME = "process"
# Details of a process worker's launch record.
START_TIME = "process_start_time"
MARKER = "marker"
# How long adopting waits for a process to finish its exec and show its command line.
EXEC_WAIT_S = 2.0


@dataclass
class _Child:
    record: LaunchRecord
    popen: "subprocess.Popen[bytes] | None" = None
    exited: bool = False


def find_process(record: LaunchRecord) -> psutil.Process | None:
    """The live process ``record`` names, if it is still the one that was recorded."""
    if not record.handle.isdigit():
        return None
    started = record.details.get(START_TIME)
    marker = record.details.get(MARKER) or record.worker_id
    return local_process.find(int(record.handle), float(started) if started else None, marker)


async def _find_after_exec(record: LaunchRecord) -> psutil.Process | None:
    """:func:`find_process` once the process shows its command line: adopting must see the marker in
    it, and a process still inside its exec shows none (``local_process.find`` then trusts the start
    time, right for watching a worker this launcher started, not for taking one over)."""
    deadline = time.monotonic() + EXEC_WAIT_S
    while True:
        process = find_process(record)
        if process is None or local_process.shows_command_line(process) or time.monotonic() >= deadline:
            return process
        await asyncio.sleep(0.01)


class ProcessLauncher:
    name = NAME
    can_start = True
    # `sluice stop` stops the manager, which stops its workers; a crashed manager's are adopted.
    workers_outlive_manager = False

    def __init__(
        self,
        *,
        command: Callable[[WorkerSpec], list[str]],
        env: Mapping[str, str],
        logs_dir: Path,
        host: str,
        gpu_ids: tuple[int, ...] = (),
        cpus: int | None = None,
        poll_interval_s: float = 0.1,
        standby: Standby | None = None,
    ) -> None:
        self._command = command
        self._env = dict(env)
        self._logs_dir = logs_dir
        self._host = host
        self._gpu_ids = gpu_ids
        # The cores workers share (None: those this process may run on).
        self._cpus = cpus
        self._poll_interval_s = poll_interval_s
        self._children: dict[str, _Child] = {}
        self._exits: asyncio.Queue[WorkerExit] = asyncio.Queue()
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False
        self._standby = standby

    async def prepare(self) -> None:
        if self._standby is not None:
            await self._standby.prepare()

    async def capacity(self) -> Capacity:
        return Capacity(host=self._host, cpus=self._cpus or local_process.cpu_count(), gpu_ids=self._gpu_ids)

    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        log_path = self._logs_dir / "workers" / f"{spec.model_name}-{spec.version}-{spec.worker_id}.log"
        popen, marker = await asyncio.to_thread(self._launch, spec, log_path)
        if marker and self._standby is not None:
            self._standby.replenish_later()
        record = LaunchRecord(
            worker_id=spec.worker_id,
            model_name=spec.model_name,
            version=spec.version,
            launcher=self.name,
            handle=str(popen.pid),
            placement=spec.placement,
            started_unix_ms=int(time.time() * 1000),
            details={
                START_TIME: str(local_process.start_time(popen.pid)),
                MARKER: marker,
                LOG_PATH: str(log_path),
            },
        )
        self._children[spec.worker_id] = _Child(record=record, popen=popen)
        self._ensure_watcher()
        log.info("worker started", model=spec.model_name, version=spec.version, worker=spec.worker_id,
                 pid=popen.pid, log_file=str(log_path), standby=bool(marker))  # fmt: skip
        return record

    def _launch(self, spec: WorkerSpec, log_path: Path) -> "tuple[subprocess.Popen[bytes], str]":
        """The worker's process and the marker of its command line ("" for its worker id)."""
        if self._standby is not None:
            taken = self._standby.assign(spec.arguments(), log_path)
            if taken is not None:
                return taken, self._standby.marker
        return local_process.spawn(self._command(spec), log_path, self._env, stdin=subprocess.DEVNULL), ""

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        child = self._children.get(worker_id)
        if child is None or child.exited:
            return
        if child.popen is None and find_process(child.record) is None:
            return
        # Our workers lead their own process group (start_new_session): signal the whole group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(child.record.handle), signal.SIGTERM if graceful else signal.SIGKILL)

    async def states(self) -> dict[str, RunState]:
        return {
            worker_id: RunState.EXITED if child.exited else RunState.RUNNING
            for worker_id, child in self._children.items()
        }

    async def adopt(self, records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
        adopted: list[LaunchRecord] = []
        for record in records:
            if (
                record.launcher != self.name
                or record.host != self._host
                or record.worker_id in self._children
            ):
                continue
            process = await _find_after_exec(record)
            if process is None:
                continue
            if START_TIME not in record.details:  # found through its announcement: note what it is
                details = {**record.details, START_TIME: str(process.create_time())}
                record = record.model_copy(update={"details": details})
            self._children[record.worker_id] = _Child(record=record)
            adopted.append(record)
            log.info("worker adopted", model=record.model_name, version=record.version,
                     worker=record.worker_id, pid=record.handle)  # fmt: skip
        if adopted:
            self._ensure_watcher()
        return adopted

    async def discover(self) -> list[LaunchRecord]:
        # A local worker without a launch record is found through the record it announced.
        return []

    async def exits(self) -> AsyncIterator[WorkerExit]:
        while True:
            yield await self._exits.get()

    async def release(self, worker_id: str) -> None:
        child = self._children.get(worker_id)
        if child is not None and child.exited:
            del self._children[worker_id]

    async def usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        found: dict[str, Usage] = {}
        for record in records:
            if record.host != self._host:
                continue
            process = find_process(record)
            if process is None:
                continue
            with contextlib.suppress(psutil.Error):
                found[record.worker_id] = Usage(memory_bytes=int(process.memory_info().rss))
        return found

    async def aclose(self) -> None:
        """Stop watching (the workers keep running). The watch loop is asked to end rather than
        cancelled (see sluice_manager.waiting)."""
        self._closing = True
        if self._standby is not None:
            await self._standby.aclose()
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
                if child.exited:
                    continue
                ended, code = _has_exited(child)
                if ended:
                    child.exited = True
                    self._exits.put_nowait(WorkerExit(worker_id, code))
            await asyncio.sleep(self._poll_interval_s)


def _has_exited(child: _Child) -> tuple[bool, int | None]:
    if child.popen is not None:
        code = child.popen.poll()
        return code is not None, code
    return find_process(child.record) is None, None


def worker_command(python: str, module: str) -> Callable[[WorkerSpec], list[str]]:
    """``<python> -m <module> <worker arguments>``: how the process launcher starts a worker."""

    def build(spec: WorkerSpec) -> list[str]:
        return [python, "-m", module, *spec.arguments()]

    return build
