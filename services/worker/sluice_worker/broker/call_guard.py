"""The inline runner's guard (:mod:`.inline_runner`): a thread that does, while the worker loop's own
thread is inside a handler call, what that loop cannot do then.

- It keeps the worker's heartbeat: a call longer than the heartbeat interval would otherwise let the
  heartbeat lapse, and peers would take the worker for dead and run its jobs again.
- At the call's deadline (``response_timeout``) it answers the call's jobs "Worker died.", acks
  them, withdraws the worker and ends the process, as the torch-thread worker does when it gives up
  on a call (TorchServe's frontend does the same for a worker whose handler hangs). A call stuck in
  C code cannot be interrupted; only the process can go.
- It runs an inline handler's intermediate replies (:meth:`CallGuard.publish`, from the handler's
  thread) on its own client, since the loop that owns the hot connection is the one blocked.

Its Redis client is redis-py's synchronous one, used by no other part of the worker.
"""

import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.exceptions import RedisError
from sluice.log import get_logger
from sluice.redis import client as redis_client

from sluice_worker.broker.outbox import Command
from sluice_worker.exit_codes import ExitCode

log = get_logger(__name__)

# How often the guard looks at the running call: the precision of its deadline and heartbeat.
POLL_S = 0.05
# How long the guard tries to answer a call it gives up on before the process exits regardless.
GIVE_UP_WAIT_S = 5.0
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 1.0


@dataclass(slots=True)
class _Watch:
    deadline: float
    give_up: Callable[[], list[Command]]
    exit_code: ExitCode
    # When the heartbeat was last renewed for this call (its start, to begin with).
    beaten_at: float
    # The caller's context: the guard's log lines carry its model, version, worker and request ids.
    context: contextvars.Context


class CallGuard:
    def __init__(
        self,
        client: "redis.Redis",
        *,
        beat_every_s: float,
        poll_s: float = POLL_S,
        exit_process: Callable[[int], None] = os._exit,
    ) -> None:
        self._client = client
        self._beat_every_s = beat_every_s
        self._poll_s = poll_s
        self._exit_process = exit_process
        self._beat: Callable[[], list[Command]] = list
        self._withdraw: Callable[[], list[Command]] = list
        self._watch: _Watch | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="call-guard", daemon=True)
        self._thread.start()

    @classmethod
    def connect(cls, redis_url: str, *, beat_every_s: float) -> "CallGuard":
        """A guard with a client of its own to ``redis_url`` (Sentinel URLs followed, as everywhere)."""
        return cls(
            redis_client.connect_sync(redis_url, timeout_s=redis_client.COMMAND_TIMEOUT_S),
            beat_every_s=beat_every_s,
        )

    def present_as(self, beat: Callable[[], list[Command]], withdraw: Callable[[], list[Command]]) -> None:
        """What renewing the heartbeat sends, and what withdraws the worker as it exits (its
        presence, once announced)."""
        self._beat, self._withdraw = beat, withdraw

    @contextmanager
    def watching(
        self,
        timeout_s: float,
        give_up: Callable[[], list[Command]],
        exit_code: ExitCode = ExitCode.HANDLER_DIED,
    ) -> Iterator[None]:
        """Guard the call made inside: past ``timeout_s`` the commands ``give_up`` returns are run
        and the process exits with ``exit_code``."""
        now = time.monotonic()
        self._watch = _Watch(now + timeout_s, give_up, exit_code, now, contextvars.copy_context())
        try:
            yield
        finally:
            self._watch = None

    def publish(self, commands: Sequence[Command], given_up: threading.Event) -> None:
        """Run ``commands`` now, on the calling thread, in order; a Redis outage is waited out (the
        handler waits with it, as it waits for a slow Redis on the torch thread) until ``given_up``."""
        delay_s = _RETRY_FIRST_S
        while not given_up.is_set():
            try:
                self._execute(commands)
                return
            except RedisError as exc:
                log.warning("intermediate reply not sent, retrying", error=str(exc), retry_in_s=delay_s)
                given_up.wait(delay_s)
                delay_s = min(delay_s * 2, _RETRY_MAX_S)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=1.0)
        self._client.close()

    def _serve(self) -> None:
        while not self._stopped.wait(self._poll_s):
            watch = self._watch
            if watch is None:
                continue
            now = time.monotonic()
            if now >= watch.deadline:
                watch.context.run(self._expire, watch)
                return
            if now - watch.beaten_at >= self._beat_every_s:
                watch.beaten_at = now
                watch.context.run(self._renew_heartbeat)

    def _renew_heartbeat(self) -> None:
        try:
            self._execute(self._beat())
        except RedisError as exc:
            log.warning("heartbeat failed, Redis unavailable", error=str(exc))

    def _expire(self, watch: _Watch) -> None:
        log.error("handler call past its deadline; the worker exits", exit_code=int(watch.exit_code))
        # The replies and acks, then the worker's record and heartbeat; its consumer stays, with any
        # job read ahead, for peers to take over.
        commands = [*watch.give_up(), *self._withdraw()]
        ends_at = time.monotonic() + GIVE_UP_WAIT_S
        while True:
            try:
                self._execute(commands)
                break
            except RedisError as exc:
                if time.monotonic() >= ends_at:
                    # The jobs stay pending under this worker: peers take them over as a dead worker's.
                    log.error("could not answer the abandoned call", error=str(exc))
                    break
                time.sleep(_RETRY_FIRST_S)
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit_process(int(watch.exit_code))

    def _execute(self, commands: Sequence[Command]) -> None:
        if not commands:
            return
        with self._client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            pipe.execute(raise_on_error=False)
