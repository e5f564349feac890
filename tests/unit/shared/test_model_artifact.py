"""A model folder as one content-addressed tar: the same content gives the same bytes, and unpacking
takes plain files and folders only, inside the target."""

import io
import os
import tarfile
from pathlib import Path

import pytest
from sluice.registry.artifact import ArtifactError, digest, unpack, write_tar


def model_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "handler.py").write_text("def handle(data, context):\n    return data\n")
    (root / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 10)
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def test_the_same_content_has_the_same_digest_whatever_its_times_and_owners(tmp_path: Path) -> None:
    first = model_folder(tmp_path / "a")
    second = model_folder(tmp_path / "b")
    os.utime(second / "handler.py", (1, 1))
    assert digest(first) == digest(second)
    (second / "handler.py").write_text("changed")
    assert digest(first) != digest(second)


def test_a_round_trip_keeps_files_folders_and_the_executable_bit(tmp_path: Path) -> None:
    source = model_folder(tmp_path / "src")
    tar_path = tmp_path / "model.tar"
    with open(tar_path, "wb") as out:
        write_tar(source, out)
    unpack(tar_path, tmp_path / "dest")
    dest = tmp_path / "dest"
    assert (dest / "sub" / "weights.bin").read_bytes() == (source / "sub" / "weights.bin").read_bytes()
    assert os.access(dest / "run.sh", os.X_OK)
    assert not os.access(dest / "handler.py", os.X_OK)
    assert digest(dest) == digest(source)


def test_a_folder_with_a_link_is_no_artifact(tmp_path: Path) -> None:
    source = model_folder(tmp_path / "src")
    (source / "link").symlink_to("/etc/passwd")
    with pytest.raises(ArtifactError, match="neither a file nor a folder"):
        digest(source)


def _tar_with(tmp_path: Path, info: tarfile.TarInfo, data: bytes = b"") -> Path:
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as archive:
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data) if data else None)
    return path


@pytest.mark.parametrize("name", ["/etc/evil", "../evil", "a/../../evil", "a\\b"])
def test_unsafe_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ArtifactError, match="unsafe entry name"):
        unpack(_tar_with(tmp_path, tarfile.TarInfo(name), b"x"), tmp_path / "dest")


def test_links_in_a_received_tar_are_refused(tmp_path: Path) -> None:
    link = tarfile.TarInfo("link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(ArtifactError, match="neither a file nor a folder"):
        unpack(_tar_with(tmp_path, link), tmp_path / "dest")
