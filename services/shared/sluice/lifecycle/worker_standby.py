"""The standby worker's contract between the process launcher and a worker process.

Starting a worker is mostly Python importing torch and TorchServe's ``ts`` (~1 s of the ~1.3 s from
spawn to READY on the bench machine). The launcher therefore keeps one process started ahead as
``<worker command> --standby``: it does those imports, then blocks reading one line from its stdin.
The line assigns it a model version: the worker's usual arguments and the log file its output goes
to from then on. End of file instead (the manager went away) ends the standby.
"""

import json
import os
import sys
from dataclasses import dataclass
from typing import BinaryIO

STANDBY_FLAG = "--standby"


class AssignmentError(ValueError):
    """A line that is not a valid assignment."""


@dataclass(frozen=True)
class Assignment:
    args: list[str]
    log_file: str

    def to_line(self) -> bytes:
        return json.dumps({"args": self.args, "log_file": self.log_file}).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> "Assignment":
        try:
            raw = json.loads(line)
            args, log_file = raw["args"], raw["log_file"]
        except (ValueError, TypeError, KeyError) as exc:
            raise AssignmentError(f"not a standby assignment: {line[:200]!r}") from exc
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise AssignmentError("assignment args must be a list of strings")
        if not isinstance(log_file, str) or not log_file:
            raise AssignmentError("assignment log_file must be a path")
        return cls(args=args, log_file=log_file)


def await_assignment(stdin: BinaryIO | None = None) -> list[str] | None:
    """Block until the launcher assigns this standby; send this process's output to the assigned
    log file and return the worker arguments. None when stdin closed without an assignment."""
    line = (stdin or sys.stdin.buffer).readline()
    if not line:
        return None
    assignment = Assignment.from_line(line)
    _redirect_output(assignment.log_file)
    return assignment.args


def _redirect_output(log_file: str) -> None:
    """stdout and stderr to ``log_file`` (appended, as the launcher opens worker logs), stdin from
    /dev/null: file descriptors, so that native code and child processes follow too."""
    sys.stdout.flush()
    sys.stderr.flush()
    log_fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.dup2(null_fd, 0)
    finally:
        os.close(log_fd)
        os.close(null_fd)
