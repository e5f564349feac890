"""The swarm launcher against the real multi-node swarm: the launcher contract (tests/support/
launcher_contract.py), then what only a swarm does (workers spread over nodes, each one service)."""

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import aiodocker
import pytest
from sluice_manager.supervision.launchers.base import NODE, Launcher
from sluice_manager.supervision.launchers.swarm import HOST, SwarmLauncher
from sluice_manager.supervision.launchers.swarm_spec import SwarmConfig

from tests.support.compose_stack import docker, wait_for
from tests.support.launcher_contract import (
    CONTRACT,
    CONTRACT_IDS,
    FAKE_WORKER_PROGRAM,
    LauncherUnderTest,
    spec,
)
from tests.support.swarm_stack import WORKER_IMAGE, SwarmStack

pytestmark = [pytest.mark.swarm, pytest.mark.timeout(300)]


@pytest.fixture
async def cluster(swarm: SwarmStack) -> AsyncIterator[str]:
    """A cluster id of this test's own; its services are removed afterwards, whatever happened."""
    cluster_id = f"t{secrets.token_hex(4)}"
    yield cluster_id
    async with aiodocker.Docker() as docker:
        filters = json.dumps({"label": [f"io.sluice.cluster={cluster_id}"]})
        for service in await docker._query_json("services", params={"filters": filters}):
            await asyncio.gather(docker.services.delete(service["ID"]), return_exceptions=True)


def config(cluster: str) -> SwarmConfig:
    # The fake worker in the image every node pulls; a short grace: the contract kills workers.
    return SwarmConfig(
        image=WORKER_IMAGE, cluster_id=cluster, command=("python", "-c", FAKE_WORKER_PROGRAM), stop_grace_s=5
    )


@pytest.fixture
async def launcher_under_test(cluster: str) -> AsyncIterator[LauncherUnderTest]:
    async def make() -> Launcher:
        return SwarmLauncher(aiodocker.Docker(), config(cluster))

    # Stopping removes the service: the program exits 0 on SIGTERM, or the task is gone before its
    # code was read (None). A kill can do no more through the swarm API (the launcher's notes).
    under = LauncherUnderTest(
        make,
        HOST,
        stopped_codes=frozenset({0, 143, None}),
        killed_codes=frozenset({0, 143, 137, None}),
        measures_usage=False,
    )
    yield under
    await under.close_all()


@pytest.mark.parametrize("check", CONTRACT, ids=CONTRACT_IDS)
async def test_contract(
    check: Callable[[LauncherUnderTest], Awaitable[None]], launcher_under_test: LauncherUnderTest
) -> None:
    await check(launcher_under_test)


async def test_workers_are_services_spread_over_the_nodes(swarm: SwarmStack, cluster: str) -> None:
    launcher = SwarmLauncher(aiodocker.Docker(), config(cluster))
    await launcher.prepare()
    try:
        capacity = await launcher.capacity()
        assert capacity.cpus >= 3, "the cores of every node that takes tasks"
        records = [await launcher.start(spec(HOST, f"95{i:02d}")) for i in range(6)]
        nodes = {record.details[NODE] for record in records}
        assert len(nodes) == 3, f"six one-replica services over three nodes: {nodes}"
        for record in records:
            assert swarm.service_tasks(record.handle)[0]["Node"] == record.details[NODE]
        # The worker containers on this engine (the manager's node) are confined as the docker
        # launcher's are, but for no-new-privileges, which this engine does not take from a service
        # spec (Privileges.NoNewPrivileges was tried: the container's SecurityOpt stayed empty).
        local = swarm.manager_node()
        mine = [r for r in records if r.details[NODE] == local]
        assert mine, f"two of six on the manager's node too: {nodes}"

        def containers_up() -> bool:
            return all(swarm.task_container(r.worker_id) for r in mine)

        wait_for(containers_up, 120, "the worker containers on the manager's node")
        for record in mine:
            host = json.loads(docker("inspect", swarm.task_container(record.worker_id)))[0]["HostConfig"]
            assert (host["ReadonlyRootfs"], host["Init"], host["CapDrop"]) == (True, True, ["ALL"])
    finally:
        await launcher.aclose()
