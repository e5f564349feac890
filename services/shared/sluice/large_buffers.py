"""Keep large buffers in the process's heap (glibc's allocator), for the processes that carry request
payloads: the gateway and the workers.

glibc serves an allocation above its mmap threshold (128 KiB, raised up to 32 MiB as such blocks are
freed) with a fresh ``mmap`` and gives it back on free, and trims the heap's free top back to the
system past its trim threshold. A multi-megabyte request then costs a page fault for every 4 KiB page
of every buffer it passes through, each time: on this machine's VM a 16 MiB input spent more in page
faults than in copying (bench/README.md, "Large inputs"). With both thresholds raised, freed payload
buffers are reused by the next request. The cost: up to :data:`KEPT_BYTES` of freed heap stays in the
process after large requests (resident only where it was touched).

A no-op where the C library is not glibc (musl, macOS), and when ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` is set (the operator's choice wins).
"""

import ctypes
import ctypes.util
import os

from sluice.log import get_logger

log = get_logger(__name__)

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Allocations up to this size come from the heap: the most glibc documents for 64-bit systems
# (HEAP_MAX_SIZE / 2). Larger ones are still mapped and unmapped each time.
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
# Free heap above this is given back to the system.
KEPT_BYTES = 256 * 1024 * 1024
OVERRIDES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_large_buffers() -> bool:
    """Raise glibc's mmap and trim thresholds; whether it was done."""
    if any(name in os.environ for name in OVERRIDES):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, KEPT_BYTES)
    )
    if not done:
        log.warning("could not raise the allocator's thresholds; large requests cost page faults")
    return done
