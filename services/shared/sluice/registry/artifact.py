"""A registered model version as one content-addressed artifact: its unpacked folder written as a
deterministic tar (entries sorted, owners, times and modes normalised), whose SHA-256 the manager
records at registration. Workers that do not see the manager's folder fetch the tar by that digest,
verify it, and unpack it into their host's cache (sluice_worker.model_fetch).

Only plain files and folders are written, and only those are unpacked: the manager unpacked and
checked the archive already (no links, no devices, no paths outside the folder), and a worker checks
again rather than trust the bytes it received.
"""

import hashlib
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import Protocol

CHUNK_BYTES = 1024 * 1024


class Writable(Protocol):
    """Where an artifact tar is written: a file, a hash, a response (only ``write`` is called)."""

    def write(self, data: bytes, /) -> int: ...


class ArtifactError(ValueError):
    """An artifact that is not what a model version's artifact must be."""


def _entries(root: Path) -> list[Path]:
    """Every folder and file under ``root``, in a fixed order; anything else is refused."""
    found: list[Path] = []
    for current, folders, files in os.walk(root):
        folders.sort()
        for name in sorted(folders) + sorted(files):
            path = Path(current, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise ArtifactError(f"{path.relative_to(root)} is neither a file nor a folder")
            found.append(path)
    return found


def _info(root: Path, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path.relative_to(root).as_posix())
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size = path.stat().st_size
        info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
    return info


def write_tar(root: Path, out: Writable) -> None:
    """Write ``root``'s content to ``out`` as the artifact tar (the same bytes for the same content)."""
    # A stream ("w|") only ever calls write() on its file object.
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
        for path in _entries(root):
            info = _info(root, path)
            if info.isdir():
                archive.addfile(info)
                continue
            with open(path, "rb") as handle:
                archive.addfile(info, handle)


class _Digest:
    """A write-only file that hashes what it is given."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return len(data)


def digest(root: Path) -> str:
    """The SHA-256 (hex) of ``root``'s artifact tar."""
    sink = _Digest()
    write_tar(root, sink)
    return sink.sha.hexdigest()


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name or "\x00" in name:
        raise ArtifactError(f"unsafe entry name: {name!r}")
    return path


def unpack(tar_path: Path, dest: Path) -> None:
    """Unpack an artifact tar into the new folder ``dest``: plain files and folders only, inside it."""
    dest.mkdir(mode=0o755)
    with tarfile.open(tar_path, mode="r:") as archive:
        for member in archive:
            target = dest / _safe_name(member.name)
            if member.isdir():
                target.mkdir(mode=0o755, parents=True, exist_ok=True)
            elif member.isreg():
                target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                source = archive.extractfile(member)
                if source is None:
                    raise ArtifactError(f"unreadable entry: {member.name!r}")
                with source, open(target, "xb") as handle:
                    while chunk := source.read(CHUNK_BYTES):
                        handle.write(chunk)
                target.chmod(0o755 if member.mode & 0o111 else 0o644)
            else:
                raise ArtifactError(f"{member.name!r} is neither a file nor a folder")
