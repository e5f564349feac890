"""Size-based rotation of the logs under ``<runtime dir>/logs/`` by copy and truncate.

Every writer (redis-server, the services, the workers, handlers printing to stdout) holds its log
open with ``O_APPEND`` for its whole life, and workers outlive a crashed manager or CLI, so nobody can
be asked to reopen a renamed file. Instead ``X.log`` is copied to ``X.log.1`` (older copies shift to
``.2`` ... and past ``backups`` are deleted) and then truncated in place; an ``O_APPEND`` writer goes
on at the new end. The copy catches up with what was appended while it ran, so only lines written
between its last read and the truncate (microseconds) can be lost. A writer without ``O_APPEND``
would leave a sparse file behind; none of Sluice's does.
"""

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class RotationLimits:
    # 0: never rotate.
    max_bytes: int
    # Rotated copies kept (0: the live file is truncated and nothing is kept).
    backups: int


def watched_logs(logs_dir: Path) -> list[Path]:
    """The live logs ``sluice start`` and the manager's process launcher write."""
    return sorted([*logs_dir.glob("*.log"), *logs_dir.glob("workers/*.log")])


def rotate_large(paths: Iterable[Path], limits: RotationLimits) -> list[Path]:
    """Rotate every file of ``paths`` over ``limits.max_bytes``; the ones rotated."""
    if limits.max_bytes <= 0:
        return []
    rotated = []
    for path in paths:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        if size > limits.max_bytes:
            rotate(path, limits.backups)
            rotated.append(path)
    return rotated


def backup_path(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.{index}")


def rotate(path: Path, backups: int) -> None:
    """Copy ``path`` to ``path.1`` (shifting older copies), then truncate it."""
    _shift_backups(path, backups)
    with open(path, "r+b") as live:
        if backups == 0:
            live.truncate(0)
            return
        temp = path.with_name(f"{path.name}.1.tmp")
        with open(temp, "wb") as copy:
            # Reading until a read comes back empty takes in what was appended while copying; the
            # truncate follows at once.
            while chunk := live.read(_CHUNK_BYTES):
                copy.write(chunk)
            live.truncate(0)
        os.replace(temp, backup_path(path, 1))


def _shift_backups(path: Path, backups: int) -> None:
    """``path.N`` -> ``path.N+1``, deleting those that would pass ``backups`` (and any left by a
    larger setting)."""
    for old in path.parent.glob(f"{path.name}.*"):
        suffix = old.name[len(path.name) + 1 :]
        if suffix.isdigit() and int(suffix) >= max(backups, 1):
            old.unlink(missing_ok=True)
    for index in range(backups - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.replace(backup_path(path, index), backup_path(path, index + 1))
