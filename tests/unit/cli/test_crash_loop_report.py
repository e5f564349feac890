"""A startup model whose workers keep failing: `sluice start` shows the log of the worker that failed,
not the newest worker log (the replacement may be loading, its log still without the error)."""

import json
from pathlib import Path

import pytest
from sluice_cli.outcome import ModelStatus, StartFailed
from sluice_cli.readiness import _fail_on_crash_loop


class StreakOnly:
    """The one Redis read the check makes: the manager's restart streak."""

    def __init__(self, streak: dict[str, object]) -> None:
        self._raw = json.dumps(streak).encode()

    def hget(self, key: str, field: str) -> bytes:
        return self._raw


def test_the_failed_workers_log_is_shown_even_when_a_newer_one_exists(tmp_path: Path) -> None:
    failed, loading = tmp_path / "broken-1.0-9002.log", tmp_path / "broken-1.0-9003.log"
    status = ModelStatus("broken", "1.0", min_workers=1, ready_workers=0, worker_logs=[failed, loading])
    client = StreakOnly({"failures": 3, "last_failure_log": str(failed)})
    with pytest.raises(StartFailed) as caught:
        _fail_on_crash_loop(client, [status])  # type: ignore[arg-type]
    assert caught.value.logs == [failed]
    assert "keep failing to start" in caught.value.reason


def test_without_a_recorded_log_the_newest_is_shown(tmp_path: Path) -> None:
    newest = tmp_path / "broken-1.0-9003.log"
    status = ModelStatus(
        "broken", "1.0", min_workers=1, ready_workers=0, worker_logs=[tmp_path / "a", newest]
    )
    with pytest.raises(StartFailed) as caught:
        _fail_on_crash_loop(StreakOnly({"failures": 3}), [status])  # type: ignore[arg-type]
    assert caught.value.logs == [newest]


def test_fewer_failures_or_a_ready_model_are_no_crash_loop(tmp_path: Path) -> None:
    waiting = ModelStatus("m", "1.0", min_workers=1, ready_workers=0)
    _fail_on_crash_loop(StreakOnly({"failures": 2}), [waiting])  # type: ignore[arg-type]
    ready = ModelStatus("m", "1.0", min_workers=1, ready_workers=1)
    _fail_on_crash_loop(StreakOnly({"failures": 9}), [ready])  # type: ignore[arg-type]
