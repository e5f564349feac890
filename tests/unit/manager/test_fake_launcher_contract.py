"""The in-memory launcher the unit tier drives the reconciler with passes the launcher contract."""

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sluice_manager.supervision.launchers.base import Launcher

from tests.support.fake_launcher import KILLED, STOPPED, FakeHost, FakeLauncher
from tests.support.launcher_contract import CONTRACT, CONTRACT_IDS, LauncherUnderTest


@pytest.fixture
async def launcher_under_test() -> AsyncIterator[LauncherUnderTest]:
    host = FakeHost()

    async def make() -> Launcher:
        return FakeLauncher(host)

    under = LauncherUnderTest(
        make, host.name, stopped_codes=frozenset({STOPPED}), killed_codes=frozenset({KILLED})
    )
    yield under
    await under.close_all()


@pytest.mark.parametrize("check", CONTRACT, ids=CONTRACT_IDS)
async def test_contract(
    check: Callable[[LauncherUnderTest], Awaitable[None]], launcher_under_test: LauncherUnderTest
) -> None:
    await check(launcher_under_test)
