"""Copy-truncate rotation of the logs under <runtime dir>/logs: bounded size and count, and a writer
that keeps its O_APPEND descriptor goes on writing into the live file."""

import os
from pathlib import Path

from sluice_cli.log_rotation import RotationLimits, backup_path, rotate_large, watched_logs


def append(fd: int, text: str) -> None:
    os.write(fd, text.encode())


def test_a_log_past_its_limit_is_rotated_and_its_writer_goes_on(tmp_path: Path) -> None:
    live = tmp_path / "gateway.log"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # as a service holds its log
    limits = RotationLimits(max_bytes=100, backups=3)
    try:
        for generation in range(6):
            append(fd, f"generation {generation}\n" + "x" * 120 + "\n")
            assert rotate_large([live], limits) == [live]
            assert live.stat().st_size == 0
        append(fd, "after the last rotation\n")
    finally:
        os.close(fd)
    assert live.read_text() == "after the last rotation\n"  # at the start, not past a hole
    backups = sorted(path.name for path in tmp_path.iterdir() if path != live)
    assert backups == ["gateway.log.1", "gateway.log.2", "gateway.log.3"]
    # Newest first: .1 holds the last generation, .3 the oldest kept.
    for index, generation in ((1, 5), (2, 4), (3, 3)):
        assert backup_path(live, index).read_text().startswith(f"generation {generation}\n")


def test_a_log_under_its_limit_is_left_alone(tmp_path: Path) -> None:
    live = tmp_path / "manager.log"
    live.write_text("short\n")
    assert rotate_large([live], RotationLimits(max_bytes=100, backups=2)) == []
    assert live.read_text() == "short\n"
    assert list(tmp_path.iterdir()) == [live]


def test_no_backups_truncates_only(tmp_path: Path) -> None:
    live = tmp_path / "redis.log"
    live.write_text("y" * 50)
    backup_path(live, 1).write_text("left by a larger sluice_log_backups")
    assert rotate_large([live], RotationLimits(max_bytes=10, backups=0)) == [live]
    assert live.read_text() == ""
    assert list(tmp_path.iterdir()) == [live]


def test_zero_max_bytes_never_rotates(tmp_path: Path) -> None:
    live = tmp_path / "redis.log"
    live.write_text("y" * 50)
    assert rotate_large([live], RotationLimits(max_bytes=0, backups=5)) == []


def test_copies_beyond_a_smaller_backup_count_are_dropped(tmp_path: Path) -> None:
    live = tmp_path / "gateway.log"
    for index in range(1, 6):
        backup_path(live, index).write_text(f"old {index}")
    live.write_text("z" * 20)
    rotate_large([live], RotationLimits(max_bytes=10, backups=2))
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "gateway.log",
        "gateway.log.1",
        "gateway.log.2",
    ]
    assert backup_path(live, 1).read_text() == "z" * 20
    assert backup_path(live, 2).read_text() == "old 1"


def test_watched_logs_are_the_services_and_the_workers(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    for name in ("redis.log", "gateway.log", "gateway.log.1", "workers/demo-1.0-9000.log", "workers/x.txt"):
        (tmp_path / name).touch()
    assert watched_logs(tmp_path) == [
        tmp_path / "gateway.log",
        tmp_path / "redis.log",
        tmp_path / "workers" / "demo-1.0-9000.log",
    ]
