"""Finding a recorded local process again: pid, start time and a word of its command line, including a
process caught inside its exec, whose command line the kernel has not filled in yet."""

from dataclasses import dataclass, field

import psutil
import pytest
from sluice_manager.supervision.launchers import local_process

STARTED = 1_700_000_000.0


@dataclass
class FakeProcess:
    pid: int
    started: float = STARTED
    argv: list[str] = field(default_factory=lambda: ["python", "-c", "...", "--standby"])
    state: str = psutil.STATUS_RUNNING

    def status(self) -> str:
        return self.state

    def create_time(self) -> float:
        return self.started

    def cmdline(self) -> list[str]:
        return self.argv


@pytest.fixture
def process(monkeypatch: pytest.MonkeyPatch) -> FakeProcess:
    fake = FakeProcess(pid=4242)
    monkeypatch.setattr(psutil, "Process", lambda pid: fake)
    return fake


def found(process: FakeProcess, started: float | None, marker: str = "--standby") -> bool:
    """Whether ``find`` answers with ``process``."""
    answer: object = local_process.find(process.pid, started, marker)
    return answer is process


def test_the_recorded_process_is_found_by_start_time_and_marker(process: FakeProcess) -> None:
    assert found(process, STARTED)
    assert found(process, None)


def test_another_start_time_or_command_line_is_another_process(process: FakeProcess) -> None:
    assert local_process.find(4242, STARTED - 100, "--standby") is None
    assert local_process.find(4242, STARTED, "--worker-id") is None
    process.state = psutil.STATUS_ZOMBIE
    assert local_process.find(4242, STARTED, "--standby") is None


def test_a_process_inside_its_exec_is_found_by_its_start_time(process: FakeProcess) -> None:
    # Popen returns before the kernel has set the new program's arguments: /proc/<pid>/cmdline is
    # empty for a moment (tens of ms under load). The recorded start time already identifies it.
    process.argv = []
    assert found(process, STARTED)
    # Without a start time the marker is all there is: not proven to be ours.
    assert local_process.find(4242, None, "--standby") is None
    # An empty command line does not excuse another start time.
    assert local_process.find(4242, STARTED + 5, "--standby") is None
