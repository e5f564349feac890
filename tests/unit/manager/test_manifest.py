"""MANIFEST.json schema and model-config.yaml parsing (reliability_security.md T-39)."""

import json
from pathlib import Path
from typing import Any

import pytest
from sluice_manager.models.archives import ArchiveError
from sluice_manager.models.manifest import (
    MAX_MANIFEST_BYTES,
    check_handler,
    read_archive,
    read_manifest,
)

from tests.support.models import ModelSpec, echo_model, write_model_dir


def model_dir_with(tmp_path: Path, manifest: Any, files: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "model"
    (folder / "MAR-INF").mkdir(parents=True)
    raw = manifest if isinstance(manifest, str | bytes) else json.dumps(manifest)
    (folder / "MAR-INF" / "MANIFEST.json").write_bytes(raw.encode() if isinstance(raw, str) else raw)
    for name, content in (files or {}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    return folder


def test_archiver_manifest_is_read(tmp_path: Path) -> None:
    spec = ModelSpec(
        name="m",
        handler="handler.py",
        files={"handler.py": "", "model.pt": "", "model-config.yaml": "batchSize: 4\ncustom: {a: 1}\n"},
        version="2.5",
        serialized_file="model.pt",
        config_file="model-config.yaml",
    )
    contents = read_archive(write_model_dir(spec, tmp_path / "m"), "m.mar")
    assert contents.manifest.model.model_name == "m"
    assert contents.manifest.version == "2.5"
    assert contents.manifest.runtime == "python"
    assert contents.manifest.archiver_version == "0.12.0"
    assert contents.model_yaml == {"batchSize": 4, "custom": {"a": 1}}


def test_missing_version_defaults_to_torchserve_default(tmp_path: Path) -> None:
    folder = model_dir_with(tmp_path, {"model": {"modelName": "m", "handler": "h.py"}}, {"h.py": ""})
    assert read_manifest(folder, "m.mar").version == "1.0"


def test_numeric_version_is_text_as_gson_reads_it(tmp_path: Path) -> None:
    folder = model_dir_with(tmp_path, {"model": {"modelName": "m", "modelVersion": 2}})
    assert read_manifest(folder, "m.mar").version == "2"


@pytest.mark.parametrize(
    ("manifest", "fragment"),
    [
        (None, "missing"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ({"runtime": "python"}, "model"),
        ({"model": "x"}, "model"),
        ({"model": {"handler": ["a"]}}, "handler"),
        ({"runtime": "LSP", "model": {"modelName": "m"}}, "runtime 'LSP' is not supported"),
        ({"runtime": "java", "model": {"modelName": "m"}}, "not supported"),
    ],
)
def test_bad_manifests_are_refused(tmp_path: Path, manifest: Any, fragment: str) -> None:
    if manifest is None:
        folder = tmp_path / "empty"
        folder.mkdir()
    else:
        folder = model_dir_with(tmp_path, manifest)
    with pytest.raises(ArchiveError) as info:
        read_manifest(folder, "bad.mar")
    assert fragment in info.value.message
    assert str(tmp_path) not in info.value.message


def test_huge_manifest_is_refused_unread(tmp_path: Path) -> None:
    folder = model_dir_with(tmp_path, "{" + " " * MAX_MANIFEST_BYTES + "}")
    with pytest.raises(ArchiveError, match="too large"):
        read_manifest(folder, "big.mar")


@pytest.mark.parametrize("field", ["serializedFile", "modelFile", "configFile"])
@pytest.mark.parametrize("name", ["missing.pt", "../../etc/passwd", "/etc/passwd"])
def test_files_named_by_the_manifest_must_be_in_the_archive(tmp_path: Path, field: str, name: str) -> None:
    folder = model_dir_with(
        tmp_path, {"model": {"modelName": "m", "handler": "h.py", field: name}}, {"h.py": ""}
    )
    with pytest.raises(ArchiveError, match=r"not (inside|in) the archive"):
        read_archive(folder, "m.mar")


@pytest.mark.parametrize(
    "yaml_text",
    [
        "!!python/object/apply:os.system ['touch {marker}']\n",
        "a: !!python/object/apply:os.system ['touch {marker}']\n",
        "a: !!python/name:os.system\n",
    ],
)
def test_yaml_with_python_tags_is_refused_and_not_run(tmp_path: Path, yaml_text: str) -> None:
    marker = tmp_path / "pwned"
    folder = model_dir_with(
        tmp_path,
        {"model": {"modelName": "m", "handler": "h.py", "configFile": "model-config.yaml"}},
        {"h.py": "", "model-config.yaml": yaml_text.format(marker=marker)},
    )
    with pytest.raises(ArchiveError, match="not valid YAML"):
        read_archive(folder, "m.mar")
    assert not marker.exists()


def test_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, 9):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{', '.join(['*' + previous] * 10)}]")
    folder = model_dir_with(
        tmp_path,
        {"model": {"modelName": "m", "handler": "h.py", "configFile": "c.yaml"}},
        {"h.py": "", "c.yaml": "\n".join(lines) + "\n"},
    )
    with pytest.raises(ArchiveError, match="too many nodes"):
        read_archive(folder, "m.mar")


@pytest.mark.parametrize(("text", "fragment"), [("- a\n- b\n", "mapping"), ("a: [\n", "not valid YAML")])
def test_yaml_must_be_a_mapping(tmp_path: Path, text: str, fragment: str) -> None:
    folder = model_dir_with(
        tmp_path,
        {"model": {"modelName": "m", "handler": "h.py", "configFile": "c.yaml"}},
        {"h.py": "", "c.yaml": text},
    )
    with pytest.raises(ArchiveError, match=fragment):
        read_archive(folder, "m.mar")


def test_yaml_dates_become_text(tmp_path: Path) -> None:
    folder = model_dir_with(
        tmp_path,
        {"model": {"modelName": "m", "handler": "h.py", "configFile": "c.yaml"}},
        {"h.py": "", "c.yaml": "when: 2024-01-02\n1: one\n"},
    )
    assert read_archive(folder, "m.mar").model_yaml == {"when": "2024-01-02", "1": "one"}


@pytest.mark.parametrize(
    "handler",
    [
        "handler.py",
        "handler",
        "handler:handle",
        "handler.py:handle",
        "pkg/inner.py",
        "pkg/inner:fn",
        "pkg.inner",
        "image_classifier",
        "base_handler",
        "ts.torch_handler.text_classifier",
    ],
)
def test_handlers_in_the_archive_or_built_in(tmp_path: Path, handler: str) -> None:
    folder = write_model_dir(echo_model(), tmp_path / "m")
    (folder / "pkg").mkdir()
    (folder / "pkg" / "inner.py").write_text("")
    assert check_handler(handler, folder, "m.mar") == handler


@pytest.mark.parametrize(
    "handler",
    [
        "../../x.py",
        "/etc/x.py",
        "pkg/../../x.py",
        "missing.py",
        "os",
        "handler.py:not-a-name",
        "handler.py:a.b",
        "han dler.py",
        "a\\b.py",
        "ts.torch_handler.unknown",
    ],
)
def test_other_handlers_are_refused(tmp_path: Path, handler: str) -> None:
    folder = write_model_dir(echo_model(), tmp_path / "m")
    with pytest.raises(ArchiveError, match="handler"):
        check_handler(handler, folder, "m.mar")


def test_handler_symlinked_out_of_the_archive_is_refused(tmp_path: Path) -> None:
    folder = write_model_dir(echo_model(), tmp_path / "m")
    outside = tmp_path / "outside.py"
    outside.write_text("")
    (folder / "linked.py").symlink_to(outside)
    with pytest.raises(ArchiveError, match="handler"):
        check_handler("linked.py", folder, "m.mar")
