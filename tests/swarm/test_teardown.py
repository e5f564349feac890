"""Last in the tier: `make swarm-down` (scripts/swarm_down.sh) leaves nothing behind."""

import pytest

from tests.support.compose_stack import docker
from tests.support.swarm_stack import NETWORK, SwarmStack

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(600)]


def test_swarm_down_leaves_nothing(swarm: SwarmStack) -> None:
    done = swarm.down()
    assert done.returncode == 0, done.stderr[-2000:]
    assert docker("info", "--format", "{{.Swarm.LocalNodeState}}").strip() == "inactive"
    assert docker("ps", "-aq", "--filter", "label=io.sluice.swarm").split() == [], "nodes, registry, front"
    assert docker("volume", "ls", "-q", "--filter", "label=io.sluice.swarm").split() == []
    networks = docker("network", "ls", "--format", "{{.Name}}").split()
    assert NETWORK not in networks
    assert "docker_gwbridge" not in networks
    again = swarm.down()
    assert again.returncode == 0, "taking down what is down is harmless"
