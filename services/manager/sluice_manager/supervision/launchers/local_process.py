"""Local processes as the process launcher runs them: spawned in a session of their own with their
output appended to a log file, and found again by pid, start time and a word of their command line
(a pid alone may have been reused)."""

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

# How far a process's start time may differ from the recorded one and still be the same process.
START_TIME_TOLERANCE_S = 1.0


def spawn(
    argv: list[str], log_path: Path, env: Mapping[str, str], *, stdin: int
) -> "subprocess.Popen[bytes]":
    """A process in a session of its own (a stop signal reaches its whole group, Ctrl-C on the
    terminal does not), its output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )


def start_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()


def find(pid: int, started: float | None, marker: str) -> psutil.Process | None:
    """The live process ``pid`` if it is the one that was recorded (same start time, ``marker`` in its
    command line); None if it is gone, a zombie, or the pid now belongs to someone else.

    A process still inside its exec shows an empty command line (the kernel sets the arguments last,
    after ``Popen`` has returned; up to tens of ms under load): with a recorded start time, which
    already tells it is the same process, that is not a mismatch."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if started is not None and abs(process.create_time() - started) > START_TIME_TOLERANCE_S:
            return None
        command_line = process.cmdline()
        if not command_line and started is not None:
            return process
        if marker not in command_line:
            return None
        return process
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def shows_command_line(process: psutil.Process) -> bool:
    try:
        return bool(process.cmdline())
    except psutil.Error:
        return False


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
