"""Where this worker finds its model's files.

The manager unpacks every archive into its models folder and records the folder and the digest of
its artifact (sluice.registry.artifact). A worker that sees that folder (the manager's host, or a shared
volume at the same path) loads from it. Any other worker (a container, another machine) fetches the
artifact from the manager's artifact endpoint (its URL and token from the broker:
:mod:`sluice_worker.broker.artifact_endpoint`), checks the digest,
and unpacks it into its host's cache, ``<model_cache_dir>/<sha256>``, once per host: workers of the
same host that start together each download into a private temporary name and the first complete
rename wins; a later worker finds the folder there.
"""

import asyncio
import hashlib
import os
import secrets
import shutil
from pathlib import Path

import aiohttp
from sluice.lifecycle.backoff import Backoff
from sluice.log import get_logger
from sluice.registry import artifact as model_artifact
from sluice.registry.records import VersionRecord

from sluice_worker.broker.artifact_endpoint import ArtifactEndpoints

log = get_logger(__name__)

CHUNK_BYTES = 1024 * 1024
_TEMPORARY = ".partial-"


class FetchError(Exception):
    """The model's files cannot be had (logged; the worker exits as after a failed load)."""


async def model_folder(
    record: VersionRecord, endpoints: ArtifactEndpoints, cache_dir: Path, wait_s: float
) -> Path:
    """The folder to load ``record``'s model from; fetching it may be retried for ``wait_s``."""
    local = Path(record.model_dir)
    if await asyncio.to_thread(local.is_dir) or not record.artifact_sha256:
        return local
    cached = cache_dir / record.artifact_sha256
    if await asyncio.to_thread(cached.is_dir):
        log.info("model found in this host's cache", path=str(cached))
        return cached
    backoff = Backoff(first_s=0.2, cap_s=5.0)
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        try:
            return await _fetch(record, endpoints, cache_dir, cached)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            delay_s = backoff.next_delay_s()
            if asyncio.get_running_loop().time() + delay_s > deadline:
                raise FetchError(f"cannot fetch the model artifact: {exc}") from exc
            log.warning("fetching the model failed, retrying", error=str(exc), retry_in_s=delay_s)
            await asyncio.sleep(delay_s)


async def _fetch(record: VersionRecord, endpoints: ArtifactEndpoints, cache_dir: Path, cached: Path) -> Path:
    endpoint = await endpoints.current()
    if endpoint is None:
        raise OSError("no manager advertises an artifact endpoint yet")
    source = f"{endpoint.url}/artifacts/{record.model_name}/{record.version}"
    await asyncio.to_thread(cache_dir.mkdir, parents=True, exist_ok=True)
    partial = cache_dir / f"{_TEMPORARY}{secrets.token_hex(6)}"
    download = partial.with_suffix(".tar")
    try:
        digest = await _download(source, endpoint.token, download)
        if digest != record.artifact_sha256:
            raise FetchError(
                f"the model artifact's digest is {digest}, the registry says {record.artifact_sha256}"
            )
        await asyncio.to_thread(model_artifact.unpack, download, partial)
        try:
            await asyncio.to_thread(os.rename, partial, cached)
        except OSError:
            if not await asyncio.to_thread(cached.is_dir):
                raise
            # Another worker of this host finished first: its folder holds the same content.
        log.info("model fetched into this host's cache", source=source, path=str(cached))
        return cached
    finally:
        await asyncio.to_thread(_remove, download, partial)


async def _download(url: str, token: str, target: Path) -> str:
    """Stream ``url`` into ``target``; returns the SHA-256 of what was received."""
    sha = hashlib.sha256()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers={"Authorization": f"Bearer {token}"}) as response,
    ):
        if response.status != 200:
            raise FetchError(f"the artifact endpoint answered {response.status} for {url}")
        handle = await asyncio.to_thread(open, target, "xb")
        try:
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                sha.update(chunk)
                await asyncio.to_thread(handle.write, chunk)
        finally:
            await asyncio.to_thread(handle.close)
    return sha.hexdigest()


def _remove(download: Path, partial: Path) -> None:
    download.unlink(missing_ok=True)
    shutil.rmtree(partial, ignore_errors=True)
