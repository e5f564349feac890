"""System shared memory, the KServe v2 / Triton extension of that name: a client puts a tensor in a
POSIX shared-memory object (``/dev/shm/<key>``), registers a region of it under a name, and names the
region in a request instead of sending the bytes; an output can be written into a region the same way.

What the gateway and the worker share: the region record, the checks on a key, and bounded reads and
writes of an object. The object is never mapped: a client can shrink it at any time, and a read of a
mapping past the object's end kills the process with SIGBUS. ``pread`` and ``pwrite`` on the descriptor
only see what is there (one copy, into the buffer the handler's tensor is built on).
"""

import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

# Where POSIX shm_open keeps its objects on Linux.
SHM_ROOT = Path("/dev/shm")
# The parameters that bind an input or a requested output to a region.
REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
PARAMETERS = frozenset({REGION, BYTE_SIZE, OFFSET})
# Keys that name objects other programs on the host keep for themselves: POSIX semaphores, and torch's
# tensors shared between processes. Registering one would let a client read or write them.
RESERVED_KEY_PREFIXES = ("sem.", "torch_")
_KEY_MAX = 255


class SharedMemoryError(ValueError):
    """A key, region or span that cannot be used (client-safe message)."""


@dataclass(frozen=True, slots=True)
class Region:
    """A registered region: ``byte_size`` bytes of the object ``key`` from ``offset``."""

    name: str
    key: str
    offset: int
    byte_size: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> "Region":
        fields = json.loads(raw)
        return cls(str(fields["name"]), str(fields["key"]), int(fields["offset"]), int(fields["byte_size"]))


def check_key(key: str) -> None:
    """A key as shm_open takes it: one name below /dev/shm, with or without a leading slash."""
    name = key[1:] if key.startswith("/") else key
    if not name or len(name) > _KEY_MAX or "/" in name or name in (".", "..") or "\0" in name:
        raise SharedMemoryError(
            f"invalid shared memory key '{key}': expected a name such as '/input0' (no other '/')"
        )
    if name.startswith(RESERVED_KEY_PREFIXES):
        raise SharedMemoryError(
            f"cannot register shared memory key '{key}': keys starting with "
            f"{', '.join(repr(p) for p in RESERVED_KEY_PREFIXES)} are reserved"
        )


def object_path(key: str) -> Path:
    check_key(key)
    return SHM_ROOT / key.removeprefix("/")


def _open(key: str, flags: int) -> int:
    """A descriptor of the object ``key``: a regular file, never followed through a link."""
    try:
        fd = os.open(object_path(key), flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise SharedMemoryError(f"Unable to open shared memory region: '{key}'") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SharedMemoryError(f"Invalid shared memory region: '{key}'")
    return fd


def object_size(key: str) -> int:
    fd = _open(key, os.O_RDONLY)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def check_region(region: Region) -> None:
    """The region lies within its object as it is now (what Triton checks at registration); the key
    is checked by opening it."""
    if region.offset < 0 or region.byte_size < 0:
        raise SharedMemoryError(f"failed to register shared memory region '{region.name}': invalid args")
    if region.offset + region.byte_size > object_size(region.key):
        raise SharedMemoryError(f"failed to register shared memory region '{region.name}': invalid args")


def read_span(key: str, offset: int, byte_size: int) -> bytearray:
    """``byte_size`` bytes of the object from ``offset``, into a buffer of their own."""
    fd = _open(key, os.O_RDONLY)
    try:
        buffer = bytearray(byte_size)
        view, done = memoryview(buffer), 0
        while done < byte_size:
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                raise SharedMemoryError(
                    f"shared memory region '{key}' ends before offset {offset} + byte size {byte_size}"
                )
            done += got
        return buffer
    finally:
        os.close(fd)


def write_span(key: str, offset: int, byte_size: int, data: bytes | memoryview) -> None:
    """``data`` written at ``offset``; it must fit the span and the object as it is now (a write past
    the end would grow the client's object)."""
    if len(data) > byte_size:
        raise SharedMemoryError(f"{len(data)} bytes do not fit a span of {byte_size} bytes")
    fd = _open(key, os.O_RDWR)
    try:
        if offset + len(data) > os.fstat(fd).st_size:
            raise SharedMemoryError(
                f"shared memory region '{key}' ends before offset {offset} + byte size {len(data)}"
            )
        view, done = memoryview(data), 0
        while done < len(data):
            done += os.pwrite(fd, view[done:], offset + done)
    finally:
        os.close(fd)
