"""The gRPC servers choose grpc.aio's poller before grpc loads (sluice/transport/grpc_poller.py)."""

import subprocess
import sys

import pytest
from sluice.transport.grpc_poller import (
    COMPLETION_QUEUE_POLLER,
    EXPERIMENTS_VARIABLE,
    use_completion_queue_poller,
)


def test_sets_the_completion_queue_poller() -> None:
    environ: dict[str, str] = {}
    use_completion_queue_poller(environ)
    assert environ == {EXPERIMENTS_VARIABLE: "-event_engine_poller_for_python"}
    assert COMPLETION_QUEUE_POLLER == "-event_engine_poller_for_python"


def test_keeps_what_the_user_set() -> None:
    environ = {EXPERIMENTS_VARIABLE: "event_engine_poller_for_python"}
    use_completion_queue_poller(environ)
    assert environ == {EXPERIMENTS_VARIABLE: "event_engine_poller_for_python"}


@pytest.mark.parametrize("entry", ["sluice_gateway.__main__", "sluice_manager.__main__"])
def test_entry_module_loads_grpc_only_after_choosing(entry: str) -> None:
    """grpc core reads GRPC_EXPERIMENTS when grpc is imported: an entry module importing it at load
    time (directly or through the app) would make the choice in main() too late."""
    probe = f"import sys, {entry}; print('grpc' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_installed_grpc_knows_the_experiment() -> None:
    """grpc core ignores an experiment it does not know, with only an "Unknown experiment" line on
    stderr: after a grpcio upgrade that drops it, the servers would silently run the other poller."""
    probe = "import grpc; grpc.aio.server()"
    env = {"GRPC_EXPERIMENTS": f"{COMPLETION_QUEUE_POLLER},no_such_experiment_for_sluice"}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True, env=env
    )
    # The made-up name proves grpc reports unknown experiments in this form.
    assert "Unknown experiment: no_such_experiment_for_sluice" in result.stderr
    assert f"Unknown experiment: {COMPLETION_QUEUE_POLLER.lstrip('-')}" not in result.stderr
