"""TorchServe's load_models / --models value."""

from pathlib import Path

import pytest
from sluice_manager.models.load_models import LoadModels, StartupModelSpec, parse_load_models, startup_specs


@pytest.mark.parametrize("value", ["", "   ", "standalone", "STANDALONE", ","])
def test_nothing_to_load(value: str) -> None:
    assert parse_load_models(value).specs == ()
    assert not parse_load_models(value).every_archive


@pytest.mark.parametrize("value", ["all", "ALL", " all "])
def test_all(value: str) -> None:
    assert parse_load_models(value) == LoadModels(every_archive=True)


def test_lists_and_names() -> None:
    parsed = parse_load_models("a.mar, b=b.tar.gz,c=,=d.mar,e=x=y.mar, f")
    assert parsed.specs == (
        StartupModelSpec("a.mar"),
        StartupModelSpec("b.tar.gz", "b"),
        StartupModelSpec("d.mar"),
        StartupModelSpec("x=y.mar", "e"),
        StartupModelSpec("f"),
    )


def test_all_takes_every_archive_and_folder_in_the_store(tmp_path: Path) -> None:
    for name in ("b.mar", "a.tar.gz", "c.model", "notes.txt", ".hidden.mar", "d.zip"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "folder").mkdir()
    (tmp_path / ".git").mkdir()
    assert [spec.url for spec in startup_specs("all", tmp_path)] == ["a.tar.gz", "b.mar", "c.model", "folder"]


def test_all_without_a_store_loads_nothing(tmp_path: Path) -> None:
    assert startup_specs("all", None) == []
    assert startup_specs("all", tmp_path / "missing") == []
    assert startup_specs("x=a.mar", None) == [StartupModelSpec("a.mar", "x")]
