"""Turning a RegisterModel ``url`` into a local archive to unpack: a name in the model store (never
outside it), or a URL (``https://``, ``file://``, ...) handed to the downloader
(:mod:`sluice_manager.models.download`, which enforces ``allowed_urls``). The downloader is a seam: any
``Download`` callable fits.
"""

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from sluice.errors import ErrorCode, SluiceError

from sluice_manager.models import archives, download, url_policy
from sluice_manager.settings import ManagerSettings

# (url, folder to download into) -> the archive file, inside that folder.
Download = Callable[[str, Path], Awaitable[Path]]
URL_REQUIRED = "Parameter url is required."


@dataclass(frozen=True)
class LocalArchive:
    path: Path
    kind: archives.ArchiveKind
    # A download of ours (deleted once unpacked), not a file of the model store.
    temporary: bool = False

    def discard(self) -> None:
        if self.temporary:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


async def fetch(
    url: str, *, model_store: Path | None, work_dir: Path, downloader: Download | None
) -> LocalArchive:
    """The archive ``url`` names. Store names are resolved inside the store only (never outside it);
    without a ``downloader`` a URL is refused as a store name (``Invalid model url``)."""
    if not url:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, URL_REQUIRED)
    if downloader is not None and url_policy.is_url(url):
        await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
        path = await downloader(url, work_dir)
        return LocalArchive(path, download.kind_of(path.name.lower()), temporary=True)
    if model_store is None:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "No model store is configured (--model-store)")
    path, kind = archives.locate(model_store, url)
    return LocalArchive(path, kind)


def settings_download(settings: ManagerSettings) -> Download:
    """The project's downloader (:func:`sluice_manager.models.download.download_archive`) bound to the
    manager settings (``allowed_urls`` and the download limits)."""

    async def fetch_url(url: str, dest_dir: Path) -> Path:
        return await download.download_archive(url, dest_dir, settings)

    return fetch_url
