"""The swarm tier: a local multi-node Docker Swarm (scripts/swarm_up.sh, three nodes: the local engine
as manager and two Docker-in-Docker nodes), driven from the host. ``make test-swarm`` runs it (``-m
swarm``); otherwise, or without an engine, every test here is skipped with the reason. The swarm is
brought up once for the tier and taken down by its last test (test_teardown.py), which checks that
nothing is left."""

from collections.abc import Iterator

import pytest

from tests.support.models import write_mar
from tests.support.steady_load import sleeper_model
from tests.support.swarm_stack import SwarmStack, unavailable_reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "swarm" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="needs a Docker engine and many minutes: make test-swarm (-m swarm)")
    for item in items:
        if item.get_closest_marker("swarm"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwarmStack]:
    """The swarm with Sluice deployed and its demo model served; ``sleeper.mar`` in its model store."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    stack = SwarmStack.create(tmp_path_factory.mktemp("swarm"))
    write_mar(sleeper_model(), stack.store).chmod(0o644)
    try:
        stack.up()
        yield stack
    finally:
        # test_teardown.py normally took it down already; this is for a run that stopped early.
        stack.down()
