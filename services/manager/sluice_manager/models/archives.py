"""Finding a model archive in the model store and unpacking it safely.

Registering a model means running its code, but reading an archive must not let it write or read
anything outside its own folder (zip slip, links, devices) or fill the disk (bombs). Every entry is
checked before a byte is written; bytes are counted while they stream, not taken from headers. The
archive is unpacked into a fresh private staging folder (0700) that is renamed into place only when
complete, so a crash leaves either nothing or a whole folder (see reliability_security.md section 2).

Kinds (torchserve.md section 5.1): a ``.mar`` (zip, files at the root), a ``.tar.gz`` (entries under
one top ``<name>/`` folder) or a folder (the archiver's ``no-archive`` format).
"""

import enum
import os
import re
import shutil
import stat
import tarfile
import tempfile
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sluice.errors import ErrorCode, SluiceError

STAGING_PREFIX = ".staging-"
_CHUNK_BYTES = 1024 * 1024
_DRIVE = re.compile(r"[A-Za-z]:")
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ArchiveKind(enum.StrEnum):
    ZIP = "zip"
    TAR_GZ = "tar.gz"
    FOLDER = "folder"


@dataclass(frozen=True)
class ExtractionLimits:
    max_total_bytes: int = 16 * 1024**3
    max_entries: int = 10_000
    # Uncompressed / compressed, per entry (zip) and for the whole archive.
    max_ratio: int = 100
    # Ratios are only checked past this much output: tiny files (an empty __init__.py) compress a lot.
    ratio_floor_bytes: int = 1024 * 1024
    max_path_length: int = 1024


class ArchiveError(SluiceError):
    """An archive that is refused; the message names the archive by its store name only."""

    def __init__(self, archive: str, reason: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, f"Invalid model archive {archive}: {reason}")


def printable(text: str, limit: int = 120) -> str:
    """``text`` safe to put in a message or a log line (no control characters, bounded)."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return cleaned + ("..." if len(text) > limit else "")


def locate(model_store: Path, url: str) -> tuple[Path, ArchiveKind]:
    """The archive ``url`` names inside ``model_store``: a file or folder name (or a path) that must
    resolve, symlinks followed, to an entry inside the store."""
    if not url or "\x00" in url or "://" in url:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid model url: {printable(url)}")
    real_store = os.path.realpath(model_store)
    target = os.path.realpath(os.path.join(real_store, url))
    if target == real_store or not is_within(real_store, target):
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT, f"Model url is not in the model store: {printable(url)}"
        )
    if not os.path.exists(target):
        raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Model not found at: {printable(url)}")
    if os.path.isdir(target):
        return Path(target), ArchiveKind.FOLDER
    if target.endswith((".tar.gz", ".tgz")):
        return Path(target), ArchiveKind.TAR_GZ
    return Path(target), ArchiveKind.ZIP


def is_within(real_root: str, real_path: str) -> bool:
    """Containment on resolved paths with ``commonpath`` (a bare prefix test accepts ``/a/b-evil``)."""
    return os.path.commonpath([real_root, real_path]) == real_root


def unpack(source: Path, kind: ArchiveKind, models_dir: Path, limits: ExtractionLimits) -> Path:
    """Unpack ``source`` into a new ``<models_dir>/<uuid>`` folder and return it."""
    models_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=models_dir))
    try:
        writer = _Writer(staging, source.name, limits, _source_bytes(source, kind))
        if kind is ArchiveKind.ZIP:
            _unpack_zip(source, writer)
        elif kind is ArchiveKind.TAR_GZ:
            _unpack_tar(source, writer)
        else:
            _copy_folder(source, writer)
        final = models_dir / uuid.uuid4().hex
        os.rename(staging, final)
        return final
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _source_bytes(source: Path, kind: ArchiveKind) -> int:
    return 0 if kind is ArchiveKind.FOLDER else source.stat().st_size


def entry_parts(name: str, archive: str, limits: ExtractionLimits) -> tuple[str, ...]:
    """The path components of an archive entry name, or :class:`ArchiveError` if it could escape."""
    shown = printable(name)
    if "\x00" in name:
        raise ArchiveError(archive, f"entry name {shown!r} contains a NUL byte")
    if "\\" in name:
        raise ArchiveError(archive, f"entry name {shown!r} contains a backslash")
    if name.startswith("/") or _DRIVE.match(name):
        raise ArchiveError(archive, f"entry {shown!r} has an absolute path")
    if len(name) > limits.max_path_length:
        raise ArchiveError(archive, f"entry name {shown!r} is too long")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise ArchiveError(archive, f"entry {shown!r} escapes the archive")
    if not parts:
        raise ArchiveError(archive, f"entry name {shown!r} is empty")
    return parts


class _Writer:
    """Writes checked entries under ``root`` and enforces the limits while bytes stream."""

    def __init__(self, root: Path, archive: str, limits: ExtractionLimits, source_bytes: int) -> None:
        self.root = os.path.realpath(root)
        self.archive = archive
        self.limits = limits
        self.source_bytes = source_bytes
        self.total_bytes = 0
        self.entries = 0
        self.seen: set[str] = set()

    def fail(self, reason: str) -> ArchiveError:
        return ArchiveError(self.archive, reason)

    def _claim(self, parts: tuple[str, ...]) -> str:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise self.fail(f"more than {self.limits.max_entries} entries")
        key = "/".join(parts)
        if key in self.seen:
            raise self.fail(f"duplicate entry {printable(key)!r}")
        self.seen.add(key)
        target = os.path.join(self.root, *parts)
        parent = os.path.dirname(target)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        # We never create links, so this only fails on a bug; it is the last line of defence.
        if not is_within(self.root, os.path.realpath(parent)):
            raise self.fail(f"entry {printable(key)!r} escapes the archive")
        return target

    def directory(self, parts: tuple[str, ...]) -> None:
        target = self._claim(parts)
        os.makedirs(target, mode=0o700, exist_ok=True)

    def file(self, parts: tuple[str, ...], stream: IO[bytes], compressed_bytes: int | None = None) -> None:
        target = self._claim(parts)
        written = 0
        fd = os.open(target, _WRITE_FLAGS, 0o600)
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(_CHUNK_BYTES):
                written += len(chunk)
                self._count(len(chunk), written, compressed_bytes)
                out.write(chunk)

    def _count(self, added: int, entry_bytes: int, compressed_bytes: int | None) -> None:
        self.total_bytes += added
        limits = self.limits
        if self.total_bytes > limits.max_total_bytes:
            raise self.fail(f"unpacks to more than {limits.max_total_bytes} bytes")
        if self.source_bytes and self.total_bytes > max(
            limits.ratio_floor_bytes, self.source_bytes * limits.max_ratio
        ):
            raise self.fail(f"compression ratio above {limits.max_ratio}:1")
        if compressed_bytes is not None and entry_bytes > max(
            limits.ratio_floor_bytes, compressed_bytes * limits.max_ratio
        ):
            raise self.fail(f"an entry has a compression ratio above {limits.max_ratio}:1")


def _unpack_zip(source: Path, writer: _Writer) -> None:
    try:
        with zipfile.ZipFile(source) as archive:
            infos = archive.infolist()
            if len(infos) > writer.limits.max_entries:
                raise writer.fail(f"more than {writer.limits.max_entries} entries")
            if sum(info.file_size for info in infos) > writer.limits.max_total_bytes:
                raise writer.fail(f"unpacks to more than {writer.limits.max_total_bytes} bytes")
            for info in infos:
                _zip_entry(archive, info, writer)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise writer.fail("not a readable zip archive") from exc
    except OSError as exc:
        raise writer.fail("an entry could not be unpacked") from exc


def _zip_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, writer: _Writer) -> None:
    parts = entry_parts(info.filename, writer.archive, writer.limits)
    mode = info.external_attr >> 16
    file_type = stat.S_IFMT(mode)
    if stat.S_ISLNK(mode):
        raise writer.fail(f"entry {printable(info.filename)!r} is a symbolic link")
    if file_type not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise writer.fail(f"entry {printable(info.filename)!r} is not a regular file")
    if info.flag_bits & 0x1:
        raise writer.fail(f"entry {printable(info.filename)!r} is encrypted")
    if info.is_dir() or file_type == stat.S_IFDIR:
        writer.directory(parts)
        return
    with archive.open(info) as stream:
        writer.file(parts, stream, compressed_bytes=info.compress_size)


def _unpack_tar(source: Path, writer: _Writer) -> None:
    try:
        with tarfile.open(source, mode="r:gz") as archive:
            top: str | None = None
            for member in _members(archive, writer):
                top = _tar_entry(archive, member, writer, top)
    except (tarfile.TarError, zlib.error, EOFError) as exc:
        raise writer.fail("not a readable tar.gz archive") from exc
    except OSError as exc:
        raise writer.fail("an entry could not be unpacked") from exc


def _members(archive: tarfile.TarFile, writer: _Writer) -> Iterator[tarfile.TarInfo]:
    """Members one at a time, counted as they are read (a header bomb stops at the entry limit)."""
    count = 0
    while (member := archive.next()) is not None:
        count += 1
        if count > writer.limits.max_entries:
            raise writer.fail(f"more than {writer.limits.max_entries} entries")
        yield member


def _tar_entry(
    archive: tarfile.TarFile, member: tarfile.TarInfo, writer: _Writer, top: str | None
) -> str | None:
    shown = printable(member.name)
    if member.issym() or member.islnk():
        raise writer.fail(f"entry {shown!r} is a link")
    if not (member.isreg() or member.isdir()) or member.issparse():
        raise writer.fail(f"entry {shown!r} is not a regular file")
    if member.isdir() and member.name.strip("/.") == "":
        return top  # "./", as `tar -C dir .` writes it: nothing to create
    parts = entry_parts(member.name, writer.archive, writer.limits)
    if top is not None and parts[0] != top:
        raise writer.fail("entries must all be under one top folder")
    if len(parts) == 1:
        if member.isdir():
            return parts[0]
        raise writer.fail(f"entry {shown!r} is not under a top folder")
    if member.isdir():
        writer.directory(parts[1:])
        return parts[0]
    stream = archive.extractfile(member)
    if stream is None:
        raise writer.fail(f"entry {shown!r} has no data")
    with stream:
        writer.file(parts[1:], stream)
    return parts[0]


def _copy_folder(source: Path, writer: _Writer) -> None:
    """Copy a no-archive folder with the same checks; links and special files are refused."""
    pending: list[tuple[str, tuple[str, ...]]] = [(str(source), ())]
    try:
        while pending:
            folder, prefix = pending.pop()
            with os.scandir(folder) as entries:
                for entry in sorted(entries, key=lambda item: item.name):
                    _copy_entry(entry, prefix, writer, pending)
    except OSError as exc:
        raise writer.fail("a file could not be copied") from exc


def _copy_entry(
    entry: os.DirEntry[str],
    prefix: tuple[str, ...],
    writer: _Writer,
    pending: list[tuple[str, tuple[str, ...]]],
) -> None:
    parts = (*prefix, *entry_parts(entry.name, writer.archive, writer.limits))
    if entry.is_symlink():
        raise writer.fail(f"{printable('/'.join(parts))!r} is a symbolic link")
    if entry.is_dir(follow_symlinks=False):
        writer.directory(parts)
        pending.append((entry.path, parts))
    elif entry.is_file(follow_symlinks=False):
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as stream:
            writer.file(parts, stream)
    else:
        raise writer.fail(f"{printable('/'.join(parts))!r} is not a regular file")


def remove_model_dir(models_dir: Path, model_dir: Path) -> bool:
    """Delete an unpacked model folder, only if it really is a direct child of ``models_dir``."""
    real_root = os.path.realpath(models_dir)
    real_dir = os.path.realpath(model_dir)
    if os.path.dirname(real_dir) != real_root or os.path.islink(model_dir):
        return False
    shutil.rmtree(real_dir, ignore_errors=True)
    return True
