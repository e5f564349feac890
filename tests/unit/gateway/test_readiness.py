"""Readiness stops even when a probe swallowed the cancellation (as redis-py can mid-command)."""

import asyncio

import grpc
from sluice_gateway.grpc_api.server import Readiness


async def test_stop_ends_a_probe_loop_that_swallowed_the_cancellation() -> None:
    probing = asyncio.Event()
    swallowed = 0

    async def probe() -> bool:
        nonlocal swallowed
        probing.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed += 1
            return False  # redis-py turned the cancellation into a connection error
        return True

    readiness = Readiness(grpc.aio.server(), ["svc"], probe, interval_s=0.01)
    readiness.start()
    await asyncio.wait_for(probing.wait(), timeout=5)
    stopping = asyncio.create_task(readiness.stop())
    done, _ = await asyncio.wait([stopping], timeout=5)  # unlike wait_for, never cancels stop()
    stopping.cancel()
    assert done, "stop() kept waiting for a task that survived its cancellation"
    assert swallowed == 1
