"""Sampling profiles with py-spy while a cell runs, reduced to the functions that take the time.

py-spy's ``raw`` format is one collapsed stack per line, ``frame;frame;...;leaf count``, each frame
``function (file:line)``; idle threads are left out, so samples / rate ~ CPU seconds. ``--native``
adds C frames (grpc core, uvloop, hiredis, torch); ``--threads`` puts the thread at each stack's root.
"""

import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# --native needs py-spy to pause the process for each sample: keep the rate modest.
RATE_HZ = 100


@dataclass(frozen=True)
class FrameShare:
    frame: str
    share: float


# Leaves where a thread waits rather than works. In --native mode py-spy samples blocked threads too;
# unresolved libc addresses are futex waits in practice (pthread_cond_wait, sem_wait).
IDLE_LEAVES = (
    "epoll_wait",
    "epoll_pwait",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "futex",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "sem_wait",
    "sem_timedwait",
    "nanosleep",
    "clock_nanosleep",
    "accept",
    "accept4",
    "__futex_abstimed_wait_common",
    "syscall",
)


def is_idle(leaf: str) -> bool:
    name, _, where = leaf.partition(" (")
    if name in IDLE_LEAVES:
        return True
    return name.startswith("0x") and "libc.so" in where


def busy_only(stacks: list[tuple[list[str], int]]) -> list[tuple[list[str], int]]:
    """The stacks whose leaf is not a wait."""
    return [(frames, count) for frames, count in stacks if frames and not is_idle(frames[-1])]


def parse_collapsed(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    """(stack root first, sample count) for each well-formed line."""
    stacks = []
    for line in lines:
        line = line.strip()
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        stacks.append((stack.split(";"), int(count)))
    return stacks


def _short(frame: str) -> str:
    """``function (path/to/file.py:123)`` -> ``function (file.py)``: lines vary, files are what matter."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({file})" if file else name


def top_self(stacks: list[tuple[list[str], int]], limit: int = 12) -> list[FrameShare]:
    """Leaf functions by share of all samples (where the CPU actually is)."""
    total = sum(count for _, count in stacks) or 1
    leaves: Counter[str] = Counter()
    for frames, count in stacks:
        if frames:
            leaves[_short(frames[-1])] += count
    return [FrameShare(frame, count / total) for frame, count in leaves.most_common(limit)]


def self_by_file(stacks: list[tuple[list[str], int]], limit: int = 10) -> list[FrameShare]:
    """Leaf samples by source file or native library: which component burns the CPU."""
    total = sum(count for _, count in stacks) or 1
    files: Counter[str] = Counter()
    for frames, count in stacks:
        if frames:
            short = _short(frames[-1])
            files[short.rpartition(" (")[2].rstrip(")") or short] += count
    return [FrameShare(file, count / total) for file, count in files.most_common(limit)]


def top_inclusive(stacks: list[tuple[list[str], int]], limit: int = 12) -> list[FrameShare]:
    """Functions by share of samples they are on the stack for (each counted once per stack); ties
    in the order they first appear, outermost first, so a report renders the same every time."""
    total = sum(count for _, count in stacks) or 1
    seen: Counter[str] = Counter()
    for frames, count in stacks:
        for frame in dict.fromkeys(_short(frame) for frame in frames):
            seen[frame] += count
    return [FrameShare(frame, count / total) for frame, count in seen.most_common(limit)]


def file_name(variant: str, concurrency: int, role: str) -> str:
    """Where a profile's raw stacks are kept, inside the run's ``profiles/`` folder."""
    return f"{variant}-c{concurrency}-{role.replace(':', '_')}.txt"


def start_recording(py_spy: str, pid: int, duration_s: float, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` for ``duration_s`` into ``output`` (raw collapsed stacks)."""
    argv = [
        py_spy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(duration_s))),
        "--rate",
        str(RATE_HZ),
        "--format",
        "raw",
        "--native",
        "--threads",
        "--output",
        str(output),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def summarize(output: Path, limit: int = 12) -> dict[str, object]:
    """Top frames of the busy samples in a raw py-spy file (waits left out)."""
    try:
        every = parse_collapsed(output.read_text(errors="replace").splitlines())
    except OSError:
        return {"samples": 0, "self": [], "inclusive": []}
    stacks = busy_only(every)
    return {
        "file": output.name,
        "samples": sum(count for _, count in every),
        "busy_samples": sum(count for _, count in stacks),
        "cpu_s_estimate": sum(count for _, count in stacks) / RATE_HZ,
        "self": [[share.frame, round(share.share, 4)] for share in top_self(stacks, limit)],
        "self_by_file": [[share.frame, round(share.share, 4)] for share in self_by_file(stacks)],
        "inclusive": [[share.frame, round(share.share, 4)] for share in top_inclusive(stacks, limit)],
    }
