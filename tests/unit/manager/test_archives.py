"""Archive unpacking against crafted malicious archives (reliability_security.md T-36..T-38)."""

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice_manager.models import archives
from sluice_manager.models.archives import ArchiveError, ArchiveKind, ExtractionLimits

from tests.support.models import echo_model, write_mar, write_model_dir, write_tar_gz

LIMITS = ExtractionLimits()


def make_zip(path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return path


def zip_info(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def tar_info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    return tmp_path / "runtime" / "models"


def unpack(path: Path, kind: ArchiveKind, models_dir: Path, limits: ExtractionLimits = LIMITS) -> Path:
    return archives.unpack(path, kind, models_dir, limits)


def assert_refused(path: Path, kind: ArchiveKind, models_dir: Path, fragment: str, **limits: int) -> None:
    outside_before = set(models_dir.parent.parent.rglob("*")) if models_dir.parent.parent.exists() else set()
    with pytest.raises(ArchiveError) as info:
        unpack(path, kind, models_dir, ExtractionLimits(**limits) if limits else LIMITS)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert fragment in info.value.message
    # Nothing is left behind: no staging folder, no model folder.
    assert list(models_dir.iterdir()) == []
    created = set(models_dir.parent.parent.rglob("*")) - outside_before - {models_dir, models_dir.parent}
    assert created == set()


# --- well-formed archives -------------------------------------------------------------------------


@pytest.mark.parametrize("writer", [write_mar, write_tar_gz])
def test_archiver_layouts_unpack(tmp_path: Path, models_dir: Path, writer: object) -> None:
    path = writer(echo_model(), tmp_path / "store")  # type: ignore[operator]
    kind = ArchiveKind.TAR_GZ if path.name.endswith(".tar.gz") else ArchiveKind.ZIP
    model_dir = unpack(path, kind, models_dir)
    assert model_dir.parent == models_dir
    assert len(model_dir.name) == 32
    assert (model_dir / "handler.py").is_file()
    assert (model_dir / "MAR-INF" / "MANIFEST.json").is_file()
    assert stat.S_IMODE(models_dir.joinpath(model_dir.name).stat().st_mode) == 0o700
    assert [p.name for p in models_dir.iterdir()] == [model_dir.name]


def test_folder_is_copied(tmp_path: Path, models_dir: Path) -> None:
    source = write_model_dir(echo_model(), tmp_path / "store" / "echo")
    model_dir = unpack(source, ArchiveKind.FOLDER, models_dir)
    assert (model_dir / "handler.py").read_bytes() == (source / "handler.py").read_bytes()
    (source / "handler.py").write_text("changed")
    assert (model_dir / "handler.py").read_text() != "changed"


def test_tar_with_dot_prefix_and_dir_entries(tmp_path: Path, models_dir: Path) -> None:
    path = make_tar(
        tmp_path / "m.tar.gz",
        [
            (tar_info("./", tarfile.DIRTYPE), None),
            (tar_info("./m", tarfile.DIRTYPE), None),
            (tar_info("./m/sub", tarfile.DIRTYPE), None),
            (tar_info("./m/sub/a.py"), b"x = 1\n"),
        ],
    )
    model_dir = unpack(path, ArchiveKind.TAR_GZ, models_dir)
    assert (model_dir / "sub" / "a.py").read_text() == "x = 1\n"


# --- entry names: zip slip and friends ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("../../evil.py", "escapes"),
        ("a/../../evil.py", "escapes"),
        ("/tmp/abs.py", "absolute"),
        ("C:/windows/evil.py", "absolute"),
        ("c:evil.py", "absolute"),
        ("..\\win.py", "backslash"),
        ("a\\b.py", "backslash"),
        ("x" * 2000, "too long"),
    ],
)
def test_zip_entry_names_are_refused(tmp_path: Path, models_dir: Path, name: str, fragment: str) -> None:
    path = make_zip(tmp_path / "bad.mar", [("MAR-INF/MANIFEST.json", b"{}"), (name, b"boom")])
    assert_refused(path, ArchiveKind.ZIP, models_dir, fragment)


def test_nul_in_a_name_is_refused() -> None:
    # Python's zipfile already cuts names at a NUL; tar and folder names go through the same check.
    with pytest.raises(ArchiveError, match="NUL"):
        archives.entry_parts("ok.py\x00../../x", "a.mar", LIMITS)


def test_zip_slip_into_a_sibling_with_the_same_prefix(tmp_path: Path, models_dir: Path) -> None:
    # "../<dir>-evil/x" passes a bare startswith() containment check; ours refuses it.
    models_dir.mkdir(parents=True)
    path = make_zip(tmp_path / "bad.mar", [(f"../{models_dir.name}-evil/x.py", b"boom")])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "escapes")
    assert not (models_dir.parent / f"{models_dir.name}-evil").exists()


def test_containment_is_not_a_prefix_test() -> None:
    assert archives.is_within("/srv/models/abc", "/srv/models/abc/x")
    assert not archives.is_within("/srv/models/abc", "/srv/models/abc-evil/x")
    assert not archives.is_within("/srv/models/abc", "/srv/models")


def test_duplicate_entries_are_refused(tmp_path: Path, models_dir: Path) -> None:
    with pytest.warns(UserWarning, match="Duplicate name"):
        path = make_zip(tmp_path / "dup.mar", [("a.py", b"1"), ("a.py", b"2")])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "duplicate")


def test_duplicate_after_normalisation_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "dup.mar", [("a.py", b"1"), ("./a.py", b"2")])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "duplicate")


# --- links, devices, FIFOs ------------------------------------------------------------------------


def test_zip_symlink_entry_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "link.mar", [(zip_info("passwd", stat.S_IFLNK | 0o777), b"/etc/passwd")])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "symbolic link")


@pytest.mark.parametrize("file_type", [stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO, stat.S_IFSOCK])
def test_zip_special_files_are_refused(tmp_path: Path, models_dir: Path, file_type: int) -> None:
    path = make_zip(tmp_path / "dev.mar", [(zip_info("dev", file_type | 0o600), b"")])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "not a regular file")


def test_encrypted_zip_entry_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "enc.mar", [("secret.py", b"data")])
    raw = bytearray(path.read_bytes())
    # Set the "encrypted" flag bit in the local and the central header (zipfile cannot write one).
    raw[6] |= 0x1
    raw[raw.rfind(b"PK\x01\x02") + 8] |= 0x1
    path.write_bytes(bytes(raw))
    assert_refused(path, ArchiveKind.ZIP, models_dir, "encrypted")


def test_tar_symlink_then_file_through_it_is_refused(tmp_path: Path, models_dir: Path) -> None:
    target = tmp_path / "outside"
    target.mkdir()
    path = make_tar(
        tmp_path / "link.tar.gz",
        [
            (tar_info("m/escape", tarfile.SYMTYPE, str(target)), None),
            (tar_info("m/escape/pwned.py"), b"boom"),
        ],
    )
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "link")
    assert list(target.iterdir()) == []


def test_tar_hardlink_to_a_symlink_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = make_tar(
        tmp_path / "hard.tar.gz",
        [
            (tar_info("m/a.py"), b"x"),
            (tar_info("m/hard", tarfile.LNKTYPE, "m/a.py"), None),
        ],
    )
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "link")


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_tar_devices_and_fifos_are_refused(tmp_path: Path, models_dir: Path, kind: bytes) -> None:
    path = make_tar(tmp_path / "dev.tar.gz", [(tar_info("m/dev", kind), None)])
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "not a regular file")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("m/../../evil.py", "escapes"), ("/m/abs.py", "absolute"), ("evil.py", "top folder")],
)
def test_tar_entry_names_are_refused(tmp_path: Path, models_dir: Path, name: str, fragment: str) -> None:
    path = make_tar(tmp_path / "bad.tar.gz", [(tar_info(name), b"boom")])
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, fragment)


def test_tar_entries_must_share_one_top_folder(tmp_path: Path, models_dir: Path) -> None:
    path = make_tar(tmp_path / "two.tar.gz", [(tar_info("a/x.py"), b"1"), (tar_info("b/y.py"), b"2")])
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "one top folder")


def test_folder_with_a_symlink_is_refused(tmp_path: Path, models_dir: Path) -> None:
    source = write_model_dir(echo_model(), tmp_path / "store" / "echo")
    os.symlink("/etc/passwd", source / "passwd")
    assert_refused(source, ArchiveKind.FOLDER, models_dir, "symbolic link")


def test_folder_with_a_fifo_is_refused(tmp_path: Path, models_dir: Path) -> None:
    source = write_model_dir(echo_model(), tmp_path / "store" / "echo")
    os.mkfifo(source / "pipe")
    assert_refused(source, ArchiveKind.FOLDER, models_dir, "not a regular file")


# --- bombs ----------------------------------------------------------------------------------------


def test_zip_total_size_limit_counts_streamed_bytes(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "big.mar", [("a.bin", os.urandom(3000))])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "more than 2000 bytes", max_total_bytes=2000)


def test_zip_whose_header_lies_about_size_is_stopped_while_streaming(
    tmp_path: Path, models_dir: Path
) -> None:
    path = make_zip(tmp_path / "liar.mar", [("a.bin", b"\0" * 50_000)])
    raw = bytearray(path.read_bytes())
    # Shrink the declared uncompressed size in the central directory (offset 24 of the entry).
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 24 : central + 28] = (10).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(ArchiveError):
        unpack(
            path, ArchiveKind.ZIP, models_dir, ExtractionLimits(max_total_bytes=1000, ratio_floor_bytes=10**9)
        )
    assert list(models_dir.iterdir()) == []


def test_zip_ratio_bomb_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "bomb.mar", [("zeros.bin", b"\0" * 5_000_000)])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "compression ratio", ratio_floor_bytes=1024)


def test_small_files_that_compress_well_are_fine(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "ok.mar", [("zeros.bin", b"\0" * 100_000)])
    assert (unpack(path, ArchiveKind.ZIP, models_dir) / "zeros.bin").stat().st_size == 100_000


def test_tar_gz_ratio_bomb_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = make_tar(tmp_path / "bomb.tar.gz", [(tar_info("m/zeros.bin"), b"\0" * 5_000_000)])
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "compression ratio", ratio_floor_bytes=1024)


def test_tar_gz_size_limit(tmp_path: Path, models_dir: Path) -> None:
    path = make_tar(tmp_path / "big.tar.gz", [(tar_info("m/a.bin"), os.urandom(5000))])
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "more than 4096 bytes", max_total_bytes=4096)


def test_zip_entry_count_limit(tmp_path: Path, models_dir: Path) -> None:
    path = make_zip(tmp_path / "many.mar", [(f"f{i}.txt", b"") for i in range(60)])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "more than 50 entries", max_entries=50)


def test_tar_entry_count_limit(tmp_path: Path, models_dir: Path) -> None:
    path = make_tar(tmp_path / "many.tar.gz", [(tar_info(f"m/f{i}.txt"), b"") for i in range(60)])
    assert_refused(path, ArchiveKind.TAR_GZ, models_dir, "more than 50 entries", max_entries=50)


def test_folder_size_limit(tmp_path: Path, models_dir: Path) -> None:
    source = write_model_dir(echo_model(), tmp_path / "store" / "echo")
    (source / "weights.bin").write_bytes(os.urandom(5000))
    assert_refused(source, ArchiveKind.FOLDER, models_dir, "more than 4096 bytes", max_total_bytes=4096)


@pytest.mark.parametrize(
    ("content", "kind"), [(b"not a zip", ArchiveKind.ZIP), (b"nope", ArchiveKind.TAR_GZ)]
)
def test_garbage_is_refused(tmp_path: Path, models_dir: Path, content: bytes, kind: ArchiveKind) -> None:
    path = tmp_path / "garbage"
    path.write_bytes(content)
    assert_refused(path, kind, models_dir, "not a readable")


def test_truncated_zip_is_refused(tmp_path: Path, models_dir: Path) -> None:
    path = write_mar(echo_model(), tmp_path / "store")
    path.write_bytes(path.read_bytes()[:-40])
    assert_refused(path, ArchiveKind.ZIP, models_dir, "not a readable")


# --- locating archives in the store ---------------------------------------------------------------


def test_locate_kinds(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_mar(echo_model(), store)
    write_tar_gz(echo_model("t"), store)
    write_model_dir(echo_model("f"), store / "f")
    assert archives.locate(store, "echo.mar") == ((store / "echo.mar").resolve(), ArchiveKind.ZIP)
    assert archives.locate(store, "t.tar.gz")[1] is ArchiveKind.TAR_GZ
    assert archives.locate(store, "f")[1] is ArchiveKind.FOLDER
    assert archives.locate(store, str(store / "echo.mar"))[1] is ArchiveKind.ZIP


@pytest.mark.parametrize(
    "url", ["../outside.mar", "/etc/passwd", "http://example.com/a.mar", "", ".", "a\x00"]
)
def test_locate_refuses_what_is_not_in_the_store(tmp_path: Path, url: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "outside.mar").write_bytes(b"")
    with pytest.raises(SluiceError) as info:
        archives.locate(store, url)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_locate_refuses_a_symlink_leading_out_of_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (tmp_path / "store-evil").mkdir()
    (tmp_path / "store-evil" / "x.mar").write_bytes(b"")
    os.symlink(tmp_path / "store-evil" / "x.mar", store / "x.mar")
    with pytest.raises(SluiceError) as info:
        archives.locate(store, "x.mar")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_locate_missing_archive_is_not_found(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    with pytest.raises(SluiceError) as info:
        archives.locate(tmp_path / "store", "nope.mar")
    assert info.value.code is ErrorCode.MODEL_NOT_FOUND


def test_remove_model_dir_only_inside_models_dir(tmp_path: Path, models_dir: Path) -> None:
    model_dir = unpack(write_mar(echo_model(), tmp_path / "store"), ArchiveKind.ZIP, models_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not archives.remove_model_dir(models_dir, elsewhere)
    assert elsewhere.exists()
    assert not archives.remove_model_dir(models_dir, models_dir / ".." / "elsewhere")
    assert archives.remove_model_dir(models_dir, model_dir)
    assert not model_dir.exists()
