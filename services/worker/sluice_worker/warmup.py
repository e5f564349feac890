"""Warm-up before READY (model-config.yaml ``warmupRequests``, :mod:`sluice.registry.warmup`): each
request of the archive's warm-up file runs through the worker's own loop (the one that will serve:
plain batching, continuous batching or the async handler's) from an in-memory :class:`WarmupSource`,
one after another, before the worker announces itself. Only then does it read its job stream, so
DescribeModel shows no READY worker meanwhile, and a version scaled from zero waits for the warm-up.

A warm-up request the handler fails fails the worker's start (the manager retries it with
TorchServe's backoff), with the handler's error in the worker log.
"""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from pathlib import Path
from typing import Protocol

from sluice.envelope import Job, Reply, WireProtocol
from sluice.log import get_logger
from sluice.registry.records import VersionRecord
from sluice.registry.warmup import WarmupFileError, WarmupRequest, read_requests

from sluice_worker.delivery import Delivery
from sluice_worker.exit_codes import ExitCode
from sluice_worker.replies import Outgoing
from sluice_worker.sequence_state import NO_STATES, StateUpdate

log = get_logger(__name__)

JOB_ID_PREFIX = "warmup-"


class WarmupFailed(Exception):
    """The warm-up file could not be read, a request failed, or the loop stopped before the end."""


class Loop(Protocol):
    async def serve(self) -> ExitCode: ...


def warmup_job(record: VersionRecord, index: int, request: WarmupRequest) -> Job:
    """A warm-up request as a TorchServe REST job of the version, answered in one piece."""
    return Job(
        job_id=f"{JOB_ID_PREFIX}{index}",
        protocol=WireProtocol.TORCHSERVE_REST,
        model_name=record.model_name,
        model_version=record.version,
        request=request.body,
        headers={"content-type": request.content_type},
        enqueued_unix_ms=int(time.time() * 1000),
        final_only=True,
    )


class WarmupSource:
    """A :class:`~sluice_worker.broker.source.JobSource` that hands out the warm-up jobs one at a time
    and keeps their final replies."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self._waiting = [Delivery(receipt=f"w{i}".encode(), job=job) for i, job in enumerate(jobs)]
        self._waiting.reverse()
        self._expected = len(jobs)
        self.replies: list[Reply] = []
        self.all_answered = asyncio.Event()
        self._next = asyncio.Event()
        self._next.set()

    async def read(self, count: int, block_ms: int | None) -> list[Delivery]:
        if block_ms and not (self._waiting and self._next.is_set()):
            # Block as a read of an idle stream would (the loop relies on it not to spin): until the
            # request running now is answered, when another waits; else until the last is answered
            # (the warm-up then stops the loop), yielding at least once.
            with contextlib.suppress(TimeoutError):
                if self._waiting:
                    await asyncio.wait_for(self._next.wait(), block_ms / 1000)
                elif self.all_answered.is_set():
                    await asyncio.sleep(0)
                else:
                    await asyncio.wait_for(self.all_answered.wait(), block_ms / 1000)
        if not self._waiting or not self._next.is_set():
            return []
        self._next.clear()
        return [self._waiting.pop()]

    async def rescue(self, held: Set[bytes]) -> list[Delivery]:
        return []

    async def cancelled(self, deliveries: Sequence[Delivery]) -> list[bool]:
        return [False] * len(deliveries)

    async def publish(self, outgoing: Sequence[Outgoing]) -> None:
        """Intermediate chunks of a warm-up request go nowhere."""

    def finish(
        self,
        outgoing: Sequence[Outgoing],
        done: Sequence[Delivery],
        *,
        batch_size: int = 0,
        states: Mapping[str, StateUpdate] = NO_STATES,
    ) -> Awaitable[None]:
        self.replies.extend(item.reply for item in outgoing if item.reply.final)
        if done:
            self._next.set()
        if len(self.replies) >= self._expected:
            self.all_answered.set()
        return _nothing()

    async def leave(self) -> None:
        """Nothing to leave."""


async def _nothing() -> None:
    return None


def _failure(reply: Reply) -> str:
    """Why a warm-up reply is a failure (empty: it is not)."""
    if reply.error_code or reply.status_code >= 400:
        return f"{reply.status_code} {reply.message or reply.error_code}"
    return ""


async def warm_up(
    record: VersionRecord,
    model_dir: Path,
    build_loop: Callable[[WarmupSource, asyncio.Event], Loop],
    timeout_s: float,
) -> int:
    """Run the version's warm-up requests through a loop ``build_loop`` makes; how many ran.
    :class:`WarmupFailed` says why the worker must not serve."""
    try:
        requests = read_requests(model_dir, record.warmup_requests)
    except WarmupFileError as exc:
        raise WarmupFailed(str(exc)) from None
    source = WarmupSource([warmup_job(record, index, request) for index, request in enumerate(requests, 1)])
    stop = asyncio.Event()
    loop = asyncio.create_task(build_loop(source, stop).serve(), name="warm-up")
    answered = asyncio.create_task(source.all_answered.wait())
    started = time.monotonic()
    try:
        done, _ = await asyncio.wait({loop, answered}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            raise WarmupFailed(f"the warm-up requests did not finish within {timeout_s:g} s")
    finally:
        answered.cancel()
        stop.set()
    exit_code = await loop
    if exit_code is not ExitCode.OK:
        raise WarmupFailed(f"the worker loop stopped during the warm-up ({exit_code.name})")
    for index, reply in enumerate(source.replies, 1):
        if failure := _failure(reply):
            raise WarmupFailed(f"warm-up request {index} of {record.warmup_requests} failed: {failure}")
    log.info("warm-up done", requests=len(requests), warmup_s=round(time.monotonic() - started, 3))
    return len(requests)
