"""The standby assignment line (pure; the fd redirection runs in the launcher's integration tests)."""

import io

import pytest
from sluice.lifecycle.worker_standby import Assignment, AssignmentError, await_assignment


def test_an_assignment_round_trips_as_one_line() -> None:
    assignment = Assignment(["--model-name", "m", "--worker-id", "9000"], "/logs/m-1.0-9000.log")
    line = assignment.to_line()
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert Assignment.from_line(line) == assignment


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b'{"args": ["--x"]}\n',
        b'{"args": "--x", "log_file": "/l"}\n',
        b'{"args": [1], "log_file": "/l"}\n',
        b'{"args": [], "log_file": ""}\n',
        b"[]\n",
    ],
)
def test_a_bad_line_is_refused(line: bytes) -> None:
    with pytest.raises(AssignmentError):
        Assignment.from_line(line)


def test_end_of_input_means_no_assignment() -> None:
    assert await_assignment(io.BytesIO(b"")) is None
