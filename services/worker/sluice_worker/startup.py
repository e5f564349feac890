"""Before the handler loads: find the version record, and enter the model folder as TorchServe does."""

import asyncio
import os
import sys
import time
from pathlib import Path

import redis.asyncio as aioredis
from sluice import registry
from sluice.backoff import Backoff
from sluice.log import get_logger
from sluice.records import VersionRecord

from sluice_worker.retries import REDIS_DOWN

log = get_logger(__name__)


async def wait_for_record(
    redis: "aioredis.Redis", model: str, version: str, wait_s: float
) -> VersionRecord | None:
    """The version's record, polled with backoff until it appears (a worker may start before its
    version is registered) or ``wait_s`` passes (0: wait forever). Redis outages count as "not yet"."""
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


def search_paths(model_dir: str, handler: str) -> list[str]:
    """What TorchServe puts on a worker's PYTHONPATH: the handler's folder when the handler string
    names one (``path/to/handler.py:fn``), then the model folder."""
    paths = []
    module_part = handler.split(":", 1)[0] if ":" in handler else ""
    if "/" in module_part:
        paths.append(str(Path(model_dir, module_part.rsplit("/", 1)[0])))
    paths.append(model_dir)
    return paths


def enter_model_dir(model_dir: str, handler: str) -> None:
    """cwd = the model folder, and its modules importable (handlers import ``model.py`` and friends)."""
    os.chdir(model_dir)
    for path in reversed(search_paths(model_dir, handler)):
        if path not in sys.path:
            sys.path.insert(0, path)


def export_sequence_header_names(id_key: str, start_key: str, end_key: str) -> None:
    """Tell TorchServe's ``Context`` which request headers carry the sequence (it reads them from
    the environment when the handler loads)."""
    os.environ["TS_REQUEST_SEQUENCE_ID"] = id_key
    os.environ["TS_REQUEST_SEQUENCE_START"] = start_key
    os.environ["TS_REQUEST_SEQUENCE_END"] = end_key
