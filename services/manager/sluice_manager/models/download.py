"""Fetching a model archive from a URL, safely (the rules are in :mod:`sluice_manager.models.url_policy`).

Use::

    async with downloaded(url, policy, staging_root) as archive:
        model_dir = archives.unpack(archive.path, archive.kind, models_dir, limits)

or, through the registration's ``fetch`` seam, :func:`download_archive` (the caller removes the file).

Nothing is fetched before :func:`~sluice_manager.models.url_policy.check_url` passed. Connections go to the
addresses a checking resolver approved (the addresses checked are the addresses connected to, so DNS
cannot change its answer in between), without a proxy, with TLS verified. Redirects are followed by
hand, each target checked like the original URL. The body is counted while it streams (size cap),
the whole fetch is timed (time cap) and progress is logged. Bytes land in a fresh private (0700)
folder under ``staging_root``; the caller gets a path only after every check passed, and the folder
is removed when the ``async with`` ends. Nothing is ever written into the model store.
"""

import asyncio
import contextlib
import ipaddress
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from sluice.errors import ErrorCode, SluiceError
from sluice.log import get_logger

from sluice_manager.models.archives import ArchiveKind
from sluice_manager.models.url_policy import (
    CheckedUrl,
    UrlPolicy,
    address_allowed,
    check_url,
    not_allowed,
    shown,
)
from sluice_manager.settings import ManagerSettings

log = get_logger(__name__)

CHUNK_BYTES = 1024 * 1024
PROGRESS_EVERY_S = 5.0
REDIRECTS = (301, 302, 303, 307, 308)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._\-]")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class DownloadedArchive:
    path: Path
    kind: ArchiveKind
    size_bytes: int
    # The URL the bytes came from (after redirects), as logs show it.
    source: str


def failed(url: str, reason: str) -> SluiceError:
    """TorchServe's DownloadModelException text (REST 400), with the reason."""
    return SluiceError(ErrorCode.INVALID_ARGUMENT, f"Failed to download model from: {shown(url)} ({reason})")


@contextlib.asynccontextmanager
async def downloaded(url: str, policy: UrlPolicy, staging_root: Path) -> AsyncIterator[DownloadedArchive]:
    """Download ``url`` into a private folder under ``staging_root``; removed afterwards."""
    checked = check_url(url, policy)  # refused before anything is created or fetched
    folder = await asyncio.to_thread(_private_folder, staging_root)
    try:
        yield await download(checked, policy, folder)
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


async def download_archive(url: str, dest_dir: Path, settings: ManagerSettings) -> Path:
    """The ``fetch.Download`` seam: download ``url`` into a new private folder inside ``dest_dir`` and
    return the file (the caller deletes it, and ``dest_dir`` with it, once unpacked)."""
    policy = policy_from_settings(settings)
    checked = check_url(url, policy)
    folder = await asyncio.to_thread(_private_folder, dest_dir)
    try:
        return (await download(checked, policy, folder)).path
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, folder, True)
        raise


def policy_from_settings(settings: ManagerSettings) -> UrlPolicy:
    """The manager settings' URL policy (``allowed_urls``, ``sluice_allowed_url_networks``, limits)."""
    return UrlPolicy.parse(
        settings.allowed_urls,
        settings.allowed_url_networks,
        max_bytes=settings.download_max_bytes,
        timeout_s=settings.download_timeout_s,
    )


def _private_folder(staging_root: Path) -> Path:
    staging_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(tempfile.mkdtemp(prefix=".download-", dir=staging_root))


async def download(checked: CheckedUrl, policy: UrlPolicy, folder: Path) -> DownloadedArchive:
    """Fetch ``checked`` into ``folder``; a partial file is removed on failure."""
    target = folder / archive_name(checked)
    started = time.monotonic()
    try:
        async with asyncio.timeout(policy.timeout_s):
            if checked.scheme == "file":
                size, source = await asyncio.to_thread(_copy_file, checked, policy, target), checked.raw
            else:
                size, source = await _fetch(checked, policy, target)
    except TimeoutError:
        target.unlink(missing_ok=True)
        raise failed(checked.raw, f"took longer than {policy.timeout_s:g} s") from None
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    log.info("model archive downloaded", url=shown(source), bytes=size,
             seconds=round(time.monotonic() - started, 3))  # fmt: skip
    return DownloadedArchive(target, kind_of(target.name), size, shown(source))


def archive_name(checked: CheckedUrl) -> str:
    """A safe file name from the URL's last path segment (the kind is read from its suffix)."""
    name = _SAFE_NAME.sub("_", unquote(checked.url.path.rsplit("/", 1)[-1]))[-128:].lstrip(".")
    return name or "model.mar"


def kind_of(name: str) -> ArchiveKind:
    return ArchiveKind.TAR_GZ if name.endswith((".tar.gz", ".tgz")) else ArchiveKind.ZIP


class CheckingResolver(AbstractResolver):
    """Resolves a host name and refuses it unless every address it resolves to is allowed."""

    def __init__(self, policy: UrlPolicy, url: str) -> None:
        self._inner = ThreadedResolver()
        self._policy = policy
        self.url = url

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = ipaddress.ip_address(result["host"].split("%", 1)[0])
            if not address_allowed(address, self._policy):
                log.warning("model URL refused: host resolves to a non-public address",
                            url=shown(self.url), host=host, address=str(address))  # fmt: skip
                raise not_allowed(self.url, "the host resolves to an address that is not public; "
                                  "see sluice_allowed_url_networks")  # fmt: skip
        return results

    async def close(self) -> None:
        await self._inner.close()


async def _fetch(checked: CheckedUrl, policy: UrlPolicy, target: Path) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(
        total=None, connect=policy.connect_timeout_s, sock_read=policy.read_idle_timeout_s
    )
    resolver = CheckingResolver(policy, checked.raw)
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, force_close=True)
    headers = {"Accept-Encoding": "identity", "User-Agent": "sluice-model-download"}
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, trust_env=False, auto_decompress=False
    ) as session:
        current = checked
        for _hop in range(policy.max_redirects + 1):
            resolver.url = current.raw
            try:
                async with session.get(current.url, allow_redirects=False, headers=headers) as response:
                    if response.status in REDIRECTS:
                        current = _redirect_target(current, response, policy)
                        continue
                    if response.status != 200:
                        raise failed(current.raw, f"the server answered HTTP {response.status}")
                    return await _save(response, current, policy, target), current.raw
            except TimeoutError:
                raise failed(current.raw, "the server stopped sending") from None
            except (aiohttp.ClientError, OSError) as exc:
                log.warning("model download failed", url=shown(current.raw), error=type(exc).__name__)
                raise failed(current.raw, "the connection failed") from None
    raise failed(checked.raw, f"more than {policy.max_redirects} redirects")


def _redirect_target(current: CheckedUrl, response: aiohttp.ClientResponse, policy: UrlPolicy) -> CheckedUrl:
    location = response.headers.get("Location")
    if not location:
        raise failed(current.raw, "a redirect without a Location")
    target = str(current.url.join(yarl.URL(location)))
    log.info("model download redirected", url=shown(current.raw), to=shown(target))
    return check_url(target, policy)  # the whole policy again: pattern, scheme, port, address


async def _save(
    response: aiohttp.ClientResponse, current: CheckedUrl, policy: UrlPolicy, target: Path
) -> int:
    length = response.content_length
    if length is not None and length > policy.max_bytes:
        raise failed(current.raw, f"larger than the {policy.max_bytes}-byte limit")
    progress = _Progress(current.raw, length)
    handle = os.open(target, _WRITE_FLAGS, 0o600)
    with os.fdopen(handle, "wb") as out:
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            progress.add(len(chunk))
            if progress.bytes > policy.max_bytes:
                raise failed(current.raw, f"larger than the {policy.max_bytes}-byte limit")
            await asyncio.to_thread(out.write, chunk)
    if length is not None and progress.bytes != length:
        raise failed(current.raw, "the body ended early")
    return progress.bytes


def _copy_file(checked: CheckedUrl, policy: UrlPolicy, target: Path) -> int:
    """A ``file://`` URL: the real path (symlinks followed) must match the patterns too."""
    path = unquote(checked.url.path)
    real = os.path.realpath(path)
    if real != path:
        check_url("file://" + real, policy)
    try:
        source = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise failed(checked.raw, "the file cannot be read") from None
    with os.fdopen(source, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise failed(checked.raw, "not a regular file")
        if info.st_size > policy.max_bytes:
            raise failed(checked.raw, f"larger than the {policy.max_bytes}-byte limit")
        copied = 0
        with os.fdopen(os.open(target, _WRITE_FLAGS, 0o600), "wb") as out:
            while chunk := src.read(CHUNK_BYTES):
                copied += len(chunk)
                if copied > policy.max_bytes:
                    raise failed(checked.raw, f"larger than the {policy.max_bytes}-byte limit")
                out.write(chunk)
    return copied


class _Progress:
    def __init__(self, url: str, total: int | None) -> None:
        self.url = shown(url)
        self.total = total
        self.bytes = 0
        self._logged_at = time.monotonic()

    def add(self, count: int) -> None:
        self.bytes += count
        now = time.monotonic()
        if now - self._logged_at >= PROGRESS_EVERY_S:
            self._logged_at = now
            log.info("model download progress", url=self.url, bytes=self.bytes, total_bytes=self.total)
