"""tests/support/models.py writes archives the way torch-model-archiver 0.12 does."""

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import models

ARCHIVER = Path(sys.executable).parent / "torch-model-archiver"


def _archiver(spec: models.ModelSpec, src: Path, out: Path, archive_format: str) -> None:
    src.mkdir()
    for name, content in spec.files.items():
        (src / name).write_bytes(content.encode() if isinstance(content, str) else content)
    args = [
        str(ARCHIVER),
        "--model-name",
        spec.name,
        "-v",
        spec.version,
        "--handler",
        str(src / spec.handler),
    ]
    if spec.serialized_file:
        args += ["--serialized-file", str(src / spec.serialized_file)]
    if spec.model_file:
        args += ["--model-file", str(src / spec.model_file)]
    if spec.config_file:
        args += ["-c", str(src / spec.config_file)]
    listed = {spec.handler, spec.serialized_file, spec.model_file, spec.config_file}
    extra = [str(src / name) for name in spec.files if name not in listed]
    if extra:
        args += ["--extra-files", ",".join(extra)]
    out.mkdir()
    # The archiver stages files under $TMPDIR/<model name>: keep that inside the test's folder.
    env = {**os.environ, "TMPDIR": str(out.parent)}
    args += ["--export-path", str(out), "--archive-format", archive_format]
    subprocess.run(args, check=True, env=env, capture_output=True)


def _without_date(manifest: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in manifest.items() if key != "createdOn"}


SPECS = [
    models.echo_model("echo", "2.0", config="sleep_s: 1\n"),
    models.ModelSpec(
        name="eagerish",
        handler="handler.py",
        files={
            "handler.py": "x = 1\n",
            "model.py": "y = 2\n",
            "weights.pth": b"\x00",
            "index_to_name.json": "{}",
        },
        serialized_file="weights.pth",
        model_file="model.py",
    ),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_mar_matches_the_archiver(spec: models.ModelSpec, tmp_path: Path) -> None:
    _archiver(spec, tmp_path / "src", tmp_path / "theirs", "default")
    ours = models.write_mar(spec, tmp_path / "ours")
    with zipfile.ZipFile(tmp_path / "theirs" / f"{spec.name}.mar") as theirs, zipfile.ZipFile(ours) as mine:
        assert sorted(mine.namelist()) == sorted(theirs.namelist())
        for name in theirs.namelist():
            if name != models.MANIFEST_PATH:
                assert mine.read(name) == theirs.read(name), name
        their_manifest = json.loads(theirs.read(models.MANIFEST_PATH))
        my_manifest = json.loads(mine.read(models.MANIFEST_PATH))
    assert _without_date(my_manifest) == _without_date(their_manifest)
    assert list(my_manifest) == list(their_manifest)  # same key order
    assert list(my_manifest["model"]) == list(their_manifest["model"])


def test_tar_gz_and_folder_match_the_archiver(tmp_path: Path) -> None:
    spec = SPECS[1]
    _archiver(spec, tmp_path / "src", tmp_path / "theirs", "tgz")
    ours = models.write_tar_gz(spec, tmp_path / "ours")
    with tarfile.open(tmp_path / "theirs" / f"{spec.name}.tar.gz") as theirs, tarfile.open(ours) as mine:
        their_files = sorted(m.name for m in theirs.getmembers() if m.isfile())
        assert sorted(m.name for m in mine.getmembers() if m.isfile()) == their_files
    folder = models.write_model_dir(spec, tmp_path / "folder")
    unpacked = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert [f"{spec.name}/{name}" for name in unpacked] == their_files
