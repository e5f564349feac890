"""System shared memory's checks on keys and its bounded reads and writes, on real /dev/shm objects."""

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sluice.kserve.shared_memory import (
    Region,
    SharedMemoryError,
    check_key,
    check_region,
    object_size,
    read_span,
    write_span,
)


@pytest.fixture
def key() -> Iterator[str]:
    name = f"sluice-unit-{uuid.uuid4().hex[:10]}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(range(64)))
    try:
        yield f"/{name}"
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.parametrize("good", ["/input0", "input0", "/psm_abc", "/a.b-c_d"])
def test_keys_shm_open_takes(good: str) -> None:
    check_key(good)


@pytest.mark.parametrize(
    "bad", ["", "/", "a/b", "/a/b", "/..", "..", ".", "/sem.lock", "torch_123", "x\0y", "/" + "k" * 256]
)
def test_keys_that_leave_dev_shm_or_are_reserved_are_refused(bad: str) -> None:
    with pytest.raises(SharedMemoryError):
        check_key(bad)


def test_a_region_must_lie_within_its_object(key: str) -> None:
    check_region(Region("r", key, 0, 64))
    check_region(Region("r", key, 60, 4))
    with pytest.raises(SharedMemoryError, match="invalid args"):
        check_region(Region("r", key, 60, 5))
    with pytest.raises(SharedMemoryError, match="Unable to open shared memory region"):
        check_region(Region("r", key + "-missing", 0, 1))


def test_reads_and_writes_stay_within_the_object(key: str) -> None:
    assert read_span(key, 8, 4) == bytearray([8, 9, 10, 11])
    write_span(key, 60, 4, b"\xff" * 4)
    assert read_span(key, 56, 8) == bytearray([56, 57, 58, 59, 255, 255, 255, 255])
    with pytest.raises(SharedMemoryError, match="ends before"):
        read_span(key, 60, 8)
    with pytest.raises(SharedMemoryError, match="ends before"):
        write_span(key, 62, 4, b"\x00" * 4)
    assert object_size(key) == 64  # a refused write did not grow the client's object
    with pytest.raises(SharedMemoryError, match="do not fit"):
        write_span(key, 0, 2, b"abc")


def test_links_and_directories_are_not_opened(key: str, tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"secret")
    link = Path("/dev/shm") / f"sluice-unit-link-{uuid.uuid4().hex[:10]}"
    os.symlink(target, link)
    folder = Path("/dev/shm") / f"sluice-unit-dir-{uuid.uuid4().hex[:10]}"
    folder.mkdir()
    try:
        with pytest.raises(SharedMemoryError, match="Unable to open"):
            read_span(f"/{link.name}", 0, 6)
        with pytest.raises(SharedMemoryError):
            object_size(f"/{folder.name}")
    finally:
        link.unlink()
        folder.rmdir()


def test_a_region_record_round_trips_as_json() -> None:
    region = Region("name", "/key", 8, 16)
    assert Region.from_json(region.to_json()) == region
