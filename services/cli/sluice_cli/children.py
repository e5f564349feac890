"""Starting and stopping the service processes. Each child gets its own session (process group), so
a Ctrl-C on the terminal reaches only its supervisor, which then stops the children in order."""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from sluice_cli.runtime import ProcessRef


@dataclass
class Children:
    """The processes this CLI invocation started (their Popen objects, to reap them)."""

    popens: dict[int, "subprocess.Popen[bytes]"] = field(default_factory=dict)

    def spawn(
        self, name: str, argv: list[str], *, env: Mapping[str, str], log_file: Path, marker: str
    ) -> ProcessRef:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "ab") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
            )
        self.popens[popen.pid] = popen
        return ProcessRef(
            name=name, pid=popen.pid, start_time=_start_time(popen.pid), marker=marker, log_file=str(log_file)
        )

    def running(self, ref: ProcessRef) -> bool:
        """Whether ``ref`` still runs. A child of ours is asked directly: just after the fork its
        command line is not yet the one ``ref.marker`` names."""
        popen = self.popens.get(ref.pid)
        return ref.alive() if popen is None else popen.poll() is None

    def exit_code(self, ref: ProcessRef) -> int | None:
        """The exit code of a child that ended (None while it runs or if it is not ours)."""
        popen = self.popens.get(ref.pid)
        return None if popen is None else popen.poll()

    def reap(self) -> None:
        for popen in self.popens.values():
            popen.poll()

    def forget(self, pid: int) -> None:
        """Drop a child that ended (and was reaped) and has been replaced."""
        self.popens.pop(pid, None)


def exit_description(code: int | None) -> str:
    """``exited with code 2``, ``exited with code -9 (SIGKILL)``, or ``exited`` when unknown."""
    if code is None:
        return "exited"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exited with code {code} ({signal.Signals(-code).name})"
    return f"exited with code {code}"


def _start_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()


def stop_process(ref: ProcessRef, timeout_s: float, children: Children | None = None) -> bool:
    """SIGTERM ``ref``, wait up to ``timeout_s``, then SIGKILL its process group. True if it stopped
    without being killed."""
    process = ref.process()
    if process is None:
        return True
    with contextlib.suppress(psutil.Error):
        process.terminate()
    if _wait_gone(ref, timeout_s, children):
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(ref.pid, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        process.kill()
    _wait_gone(ref, 5.0, children)
    return False


def kill_process(ref: ProcessRef) -> None:
    if ref.process() is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(ref.pid, signal.SIGKILL)


def _wait_gone(ref: ProcessRef, timeout_s: float, children: Children | None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if children is not None:
            children.reap()
        if not ref.alive():
            return True
        time.sleep(0.05)
    return not ref.alive()


def log_tail(path: Path | str, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of a log file (empty if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]
