"""The async handlers' event-loop thread: ``on_start`` (the worker activates the CUDA device there,
CUDA's current device being per thread) runs on the thread the coroutines then run on, before them."""

import asyncio
import threading

from sluice_worker.handler_loop import HandlerLoop


def test_coroutines_run_on_the_thread_on_start_prepared() -> None:
    started: list[int] = []
    loop = HandlerLoop(on_start=lambda: started.append(threading.get_ident()))
    try:

        async def where() -> int:
            await asyncio.sleep(0)
            return threading.get_ident()

        ran_on = loop.submit(where()).result(timeout=5)
        assert started == [ran_on]
        assert ran_on != threading.get_ident()
    finally:
        loop.close()


def test_cancelling_the_future_cancels_the_coroutine() -> None:
    loop = HandlerLoop()
    cancelled = threading.Event()
    try:

        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        future = loop.submit(forever())
        assert not cancelled.wait(0.05)
        future.cancel()
        assert cancelled.wait(5)
    finally:
        loop.close()
