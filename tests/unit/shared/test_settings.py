"""The shared settings layer: environment names, command-line flags and the one-line error."""

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import pytest
from sluice.settings.common import CommonSettings, describe_error
from sluice.typed import Bounds, InvalidValue


@dataclass(init=False, kw_only=True)
class _Example(CommonSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {"job_queue_size": "job_queue_size"}
    job_queue_size: Annotated[int, Bounds(ge=1)] = 100
    enable_thing: bool = False
    model_store: Path | None = None
    burst: int = 1

    def check(self) -> None:
        if self.burst > self.job_queue_size:
            raise InvalidValue("", "burst must not exceed job_queue_size")


class _Undecorated(_Example):
    late: int = 0


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TS_CONFIG_FILE", "SLUICE_TS_CONFIG", "SLUICE_JOB_QUEUE_SIZE", "SLUICE_ENABLE_THING"):
        monkeypatch.delenv(name, raising=False)


def test_environment_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("sluice_job_queue_size", "12")
    monkeypatch.setenv("SLUICE_ENABLE_THING", "yes")
    monkeypatch.setenv("SLUICE_NOT_A_SETTING", "ignored")
    settings = _Example()
    assert (settings.job_queue_size, settings.enable_thing) == (12, True)


def test_flags_take_dashes_or_underscores_and_beat_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLUICE_JOB_QUEUE_SIZE", "12")
    assert _Example.from_command_line([], prog="x").job_queue_size == 12
    assert _Example.from_command_line(["--job-queue-size", "3"], prog="x").job_queue_size == 3
    settings = _Example.from_command_line(["--job_queue_size=4", "--model-store", "/srv/m"], prog="x")
    assert (settings.job_queue_size, settings.model_store) == (4, Path("/srv/m"))


def test_a_bool_flag_alone_means_true() -> None:
    assert _Example.from_command_line(["--enable-thing"], prog="x").enable_thing is True
    assert _Example.from_command_line(["--enable-thing", "false"], prog="x").enable_thing is False


def test_flags_beat_config_properties(tmp_path: Path) -> None:
    config = tmp_path / "config.properties"
    config.write_text("job_queue_size=7\n")
    settings = _Example.from_command_line(["--ts-config", str(config)], prog="x")
    assert settings.job_queue_size == 7
    settings = _Example.from_command_line(["--ts-config", str(config), "--job-queue-size", "8"], prog="x")
    assert settings.job_queue_size == 8


def test_an_unknown_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _Example.from_command_line(["--no-such-setting", "1"], prog="x")
    assert exited.value.code == 2
    assert "--no-such-setting" in capsys.readouterr().err


def test_invalid_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _Example.from_command_line(["--job-queue-size", "zero"], prog="x")
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("x: error: invalid setting job_queue_size: ")
    monkeypatch.setenv("SLUICE_JOB_QUEUE_SIZE", "0")
    with pytest.raises(InvalidValue) as from_env:
        _Example()
    assert describe_error(from_env.value) == "invalid setting job_queue_size: must be >= 1 (got 0)"


def test_a_check_across_settings_is_described_without_a_location() -> None:
    with pytest.raises(InvalidValue) as refused:
        _Example(burst=5, job_queue_size=2)
    assert describe_error(refused.value) == "invalid settings: burst must not exceed job_queue_size"


def test_a_subclass_must_be_a_settings_dataclass() -> None:
    # Its own fields would silently never be read.
    with pytest.raises(TypeError, match="@dataclass"):
        _Undecorated()
