"""``WAIT`` after admitted jobs (``sluice_redis_wait_replicas``), coalesced: a job's call goes on once
that many replicas hold everything the enqueue connection wrote up to and including its job, or once
the timeout passed.

WAIT blocks the connection it is sent on, and only covers that connection's earlier writes, so it
runs on the hot-path connection itself. One WAIT is in flight at a time: jobs admitted meanwhile
share the next one, sent when it returns (it covers their writes too). With replicas down, the
connection then stalls at most one timeout per round of jobs, not one per job.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from sluice.log import get_logger
from sluice.redis.errors import RedisError
from sluice.redis.link import RedisLink

log = get_logger(__name__)

# A WAIT's reply may come this much later than its own timeout before the connection counts as lost.
_REPLY_MARGIN_S = 5.0


@dataclass(frozen=True)
class ReplicaWait:
    """``WAIT replicas timeout_ms`` after admitted jobs; ``replicas`` 0: none."""

    replicas: int = 0
    timeout_ms: int = 100


class ReplicaBarrier:
    def __init__(self, redis: RedisLink, wait: ReplicaWait) -> None:
        self._redis = redis
        self._wait = wait
        self._in_flight: asyncio.Future[Any] | None = None
        # The WAIT to send when the one in flight returns, awaited by the jobs admitted meanwhile.
        self._queued: asyncio.Future[Any] | None = None

    @property
    def enabled(self) -> bool:
        return self._wait.replicas > 0

    async def after_write(self) -> None:
        """Return once the replicas asked for hold this connection's writes so far (or the wait
        timed out, or Redis failed: the writes stand either way, and are logged)."""
        if self._in_flight is None:
            future = self._start()
        else:
            if self._queued is None:
                self._queued = asyncio.get_running_loop().create_future()
            future = self._queued
        try:
            acknowledged = await asyncio.shield(future)
        except RedisError as exc:
            log.warning("WAIT for replicas failed; the job was admitted", error=str(exc))
            return
        if acknowledged < self._wait.replicas:
            log.warning(
                "job admitted before enough replicas had it",
                replicas=acknowledged,
                wanted=self._wait.replicas,
                timeout_ms=self._wait.timeout_ms,
            )

    def _start(self) -> "asyncio.Future[Any]":
        wait = self._wait
        timeout_s = wait.timeout_ms / 1000 + _REPLY_MARGIN_S
        future = self._redis.send("WAIT", wait.replicas, wait.timeout_ms, timeout_s=timeout_s)
        self._in_flight = future
        future.add_done_callback(self._finished)
        return future

    def _finished(self, done: "asyncio.Future[Any]") -> None:
        self._in_flight = None
        queued, self._queued = self._queued, None
        if queued is None:
            return
        self._start().add_done_callback(lambda sent: _settle(queued, sent))


def _settle(target: "asyncio.Future[Any]", source: "asyncio.Future[Any]") -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (error := source.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
