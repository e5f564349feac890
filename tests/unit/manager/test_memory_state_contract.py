"""The in-memory store the unit tier drives the reconcile loop with passes the supervision store
contract (tests/support/state_store_contract.py), on a simulated clock."""

from collections.abc import Awaitable, Callable

import pytest
from sluice.registry.records import VersionRecord, WorkerRecord

from tests.support.memory_worker_state import MemoryWorkerState
from tests.support.sim_clock import SimClock
from tests.support.state_store_contract import CONTRACT, CONTRACT_IDS, StoreUnderTest


@pytest.fixture
def store_under_test() -> StoreUnderTest:
    clock = SimClock()
    store = MemoryWorkerState(clock)

    async def register(record: VersionRecord, active: bool) -> None:
        store.register(record, active=active)

    async def announce(model: str, version: str, record: WorkerRecord, ttl_s: float) -> None:
        store.announce(model, version, record, ttl_s=ttl_s)

    async def enqueue(model: str, version: str, count: int) -> None:
        store.enqueue(model, version, count)

    async def take(model: str, version: str, worker_id: str, count: int) -> None:
        store.take(model, version, worker_id, count)

    async def wait(seconds: float) -> None:
        clock.advance(seconds)

    return StoreUnderTest(store, register, announce, enqueue, take, wait, clock)


@pytest.mark.parametrize("check", CONTRACT, ids=CONTRACT_IDS)
async def test_contract(
    check: Callable[[StoreUnderTest], Awaitable[None]], store_under_test: StoreUnderTest
) -> None:
    await check(store_under_test)
