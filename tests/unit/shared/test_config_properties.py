from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from sluice.settings.common import CommonSettings
from sluice.settings.config_properties import parse_properties


def test_parse_properties_handles_comments_separators_and_continuations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_STORE", "/srv/models")
    text = "\n".join(
        [
            "# comment",
            "! also a comment",
            "inference_address=http://127.0.0.1:8080",
            "grpc_inference_port: 7075",
            "model_store=$$MY_STORE$$",
            "allowed_urls=https://a.example/.*,\\",
            "    https://b.example/.*",
            "flag",
        ]
    )
    parsed = parse_properties(text)
    assert parsed["inference_address"] == "http://127.0.0.1:8080"
    assert parsed["grpc_inference_port"] == "7075"
    assert parsed["model_store"] == "/srv/models"
    assert parsed["allowed_urls"] == "https://a.example/.*,https://b.example/.*"
    assert parsed["flag"] == ""


@dataclass(init=False, kw_only=True)
class _Example(CommonSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {"job_queue_size": "job_queue_size"}
    job_queue_size: int = 100


def test_precedence_env_over_properties_over_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.properties"
    config.write_text("job_queue_size=7\n")
    monkeypatch.delenv("TS_CONFIG_FILE", raising=False)
    monkeypatch.delenv("SLUICE_JOB_QUEUE_SIZE", raising=False)
    assert _Example().job_queue_size == 100
    monkeypatch.setenv("SLUICE_TS_CONFIG", str(config))
    assert _Example().job_queue_size == 7
    monkeypatch.setenv("SLUICE_JOB_QUEUE_SIZE", "9")
    assert _Example().job_queue_size == 9
    assert _Example(job_queue_size=11).job_queue_size == 11


def test_explicit_ts_config_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.properties"
    config.write_text("job_queue_size=5\n")
    monkeypatch.delenv("TS_CONFIG_FILE", raising=False)
    monkeypatch.delenv("SLUICE_TS_CONFIG", raising=False)
    monkeypatch.delenv("SLUICE_JOB_QUEUE_SIZE", raising=False)
    assert _Example(ts_config=config).job_queue_size == 5
