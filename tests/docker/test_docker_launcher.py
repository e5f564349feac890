"""The docker launcher against a real engine: the launcher contract (tests/support/
launcher_contract.py), then what only containers do (labels, confinement, events after the fact)."""

from collections.abc import AsyncIterator, Awaitable, Callable

import aiodocker
import pytest
from sluice_manager.supervision.launchers.base import Launcher
from sluice_manager.supervision.launchers.docker import DockerConfig, DockerLauncher

from tests.docker.conftest import BASE_IMAGE
from tests.support.launcher_contract import (
    CONTRACT,
    CONTRACT_IDS,
    FAKE_WORKER_PROGRAM,
    ExitWatch,
    LauncherUnderTest,
    spec,
)


def config(cluster: str) -> DockerConfig:
    return DockerConfig(image=BASE_IMAGE, cluster_id=cluster, command=("python3", "-c", FAKE_WORKER_PROGRAM))


@pytest.fixture
async def launcher_under_test(docker: aiodocker.Docker, cluster: str) -> AsyncIterator[LauncherUnderTest]:
    engine = str((await docker.system.info())["Name"])

    async def make() -> Launcher:
        return DockerLauncher(aiodocker.Docker(), config(cluster))

    # 143: SIGTERM reached the program before it handled it; 137: SIGKILL.
    under = LauncherUnderTest(make, engine, stopped_codes=frozenset({0, 143}), killed_codes=frozenset({137}))
    yield under
    await under.close_all()


@pytest.mark.parametrize("check", CONTRACT, ids=CONTRACT_IDS)
async def test_contract(
    check: Callable[[LauncherUnderTest], Awaitable[None]], launcher_under_test: LauncherUnderTest
) -> None:
    await check(launcher_under_test)


async def test_a_worker_container_is_labelled_and_confined(docker: aiodocker.Docker, cluster: str) -> None:
    launcher = DockerLauncher(aiodocker.Docker(), config(cluster))
    await launcher.prepare()
    try:
        engine = (await launcher.capacity()).host
        record = await launcher.start(spec(engine, "9100"))
        info = await docker.containers.container(record.handle).show()
        assert info["Config"]["Labels"] == {
            "io.sluice.cluster": cluster,
            "io.sluice.model": "m",
            "io.sluice.version": "1.0",
            "io.sluice.worker": "9100",
        }
        host = info["HostConfig"]
        assert (host["Init"], host["ReadonlyRootfs"], host["Privileged"]) == (True, True, False)
        assert host["RestartPolicy"]["Name"] in ("no", "")
        assert record.details["container"] == record.handle[:12]
    finally:
        await launcher.aclose()


async def test_an_exit_no_event_reported_is_found_by_the_next_look(
    docker: aiodocker.Docker, cluster: str
) -> None:
    first = DockerLauncher(aiodocker.Docker(), config(cluster))
    await first.prepare()
    record = await first.start(spec((await first.capacity()).host, "9101"))
    await first.aclose()
    # Not prepared: this launcher follows no events, as when the engine's event stream was down.
    blind = DockerLauncher(aiodocker.Docker(), config(cluster))
    watch = ExitWatch(blind)
    try:
        assert [r.worker_id for r in await blind.adopt([record])] == ["9101"]
        await docker.containers.container(record.handle).kill(signal="SIGKILL")
        states = await blind.states()
        assert states["9101"].value == "exited"
        assert (await watch.wait_for("9101")).exit_code == 137
        await blind.release("9101")
        gone = await docker.containers.list(all=True, filters=f'{{"id": ["{record.handle}"]}}')
        assert gone == [], "a released container is removed"
    finally:
        watch.close()
        await blind.aclose()
