"""The version record a starting worker waits for (a worker may start before its version is
registered)."""

import asyncio
import time

import redis.asyncio as aioredis
from sluice.lifecycle.backoff import Backoff
from sluice.log import get_logger
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord

from sluice_worker.broker.retries import REDIS_DOWN

log = get_logger(__name__)


async def wait_for_record(
    redis: "aioredis.Redis", model: str, version: str, wait_s: float
) -> VersionRecord | None:
    """The version's record, polled with backoff until it appears or ``wait_s`` passes (0: wait
    forever). Redis outages count as "not yet"."""
    deadline = None if wait_s == 0 else time.monotonic() + wait_s
    backoff = Backoff(first_s=0.1, cap_s=2.0)
    while True:
        try:
            record = await registry.get_version(redis, model, version)
            if record is not None:
                return record
            reason = "not registered yet"
        except REDIS_DOWN as exc:
            reason = f"Redis unavailable: {exc}"
        delay_s = backoff.next_delay_s()
        if deadline is not None and time.monotonic() + delay_s > deadline:
            return None
        log.info("waiting for the version record", reason=reason, retry_in_s=delay_s)
        await asyncio.sleep(delay_s)
