"""The synchronous worker loop's runner: the handler runs on the worker loop's own thread, so a call
costs no hand-off to a torch thread and no wake-up of the loop when it returns (at C=1 that is
about a sixth of a small model's latency and of the worker's CPU per request, docs/design.md).

Only plain batching of a stateless version runs inline (``sluice_inline_handler``, on by default):
continuous batching and stateful models keep :class:`~.torch_thread.TorchThread`, async handlers
their own loop. While a call runs, the event loop is stopped; the guard thread
(:class:`~.broker.call_guard.CallGuard`) keeps the heartbeat and the ``response_timeout`` watchdog
meanwhile. The handler is loaded on this thread too, so whatever it sets up per thread (CUDA's
current device, torch's grad mode) holds when it runs.
"""

import time
from collections.abc import Callable
from typing import Any, TypeVar

from sluice_worker.broker.call_guard import CallGuard
from sluice_worker.broker.outbox import Command
from sluice_worker.exit_codes import ExitCode
from sluice_worker.torch_thread import HandlerExit

T = TypeVar("T")


class InlineRunner:
    def __init__(self, guard: CallGuard) -> None:
        self.guard = guard
        # How long the last call ran (as TorchThread.last_call_s).
        self.last_call_s = 0.0
        self._ran_s = 0.0
        self._running_since: float | None = None

    @property
    def busy(self) -> bool:
        return self._running_since is not None

    def busy_s(self) -> float:
        """Seconds spent in calls, the running one included (read by the heartbeat's refresh)."""
        since = self._running_since
        return self._ran_s + (time.perf_counter() - since if since is not None else 0.0)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` here and now; ``sys.exit()`` in it raises HandlerExit, as on the torch thread."""
        self._running_since = started = time.perf_counter()
        try:
            return fn(*args)
        except Exception:
            raise
        except BaseException as exc:
            raise HandlerExit(exc) from exc
        finally:
            self.last_call_s = time.perf_counter() - started
            self._ran_s += self.last_call_s
            self._running_since = None

    async def run_within(
        self,
        timeout_s: float,
        give_up: Callable[[], list[Command]],
        fn: Callable[..., T],
        *args: Any,
        exit_code: ExitCode = ExitCode.HANDLER_DIED,
    ) -> T:
        """:meth:`run` under the guard's watchdog: past ``timeout_s`` the guard runs ``give_up``'s
        commands and the process exits with ``exit_code``."""
        with self.guard.watching(timeout_s, give_up, exit_code):
            return await self.run(fn, *args)

    def close(self) -> None:
        self.guard.stop()
