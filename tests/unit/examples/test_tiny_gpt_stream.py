"""examples/tiny_gpt's plain streaming handler (``tiny_gpt_plain.mar``, the no-continuous-batching
baseline of ``make bench-generate``), loaded from its real archive as TorchServe's worker loads it and
called through ``Service.predict``: every token but the last as an intermediate frame, then the last."""

import json
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ts
import yaml
from sluice_worker import frames
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.model_loader import TsModelLoader

from examples.tiny_gpt import archive, reference

METRICS_CONFIG = Path(ts.__file__).parent / "configs" / "metrics.yaml"
BUDGET = 5
LONG = "The quick brown fox"  # no EOS within 64 tokens


class FakeSocket:
    """``context.cl_socket``: the intermediate frames ``send_intermediate_predict_response`` sends."""

    def __init__(self) -> None:
        self.frames: list[frames.PredictFrame] = []

    def sendall(self, data: bytes | bytearray) -> None:
        self.frames.append(frames.decode(data))


@pytest.fixture(scope="module")
def mar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return archive.build_archive(tmp_path_factory.mktemp("store"), "tiny_gpt_plain", max_new_tokens=BUDGET)


@pytest.fixture
def service(mar: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    model_dir = tmp_path / "tiny_gpt_plain"
    with zipfile.ZipFile(mar) as unpacked:
        unpacked.extractall(model_dir)
    monkeypatch.syspath_prepend(str(model_dir))
    metrics = MetricsCacheYamlImpl(config_file_path=str(METRICS_CONFIG))
    metrics.initialize_cache()
    metrics.model_name = "tiny_gpt_plain"
    loaded = TsModelLoader().load(
        "tiny_gpt_plain", str(model_dir), "tiny_gpt_stream_handler.py", None, 1, None, metrics_cache=metrics
    )
    loaded.set_cl_socket(FakeSocket())
    yield loaded
    for name in [name for name in sys.modules if name.startswith("tiny_gpt_")]:
        del sys.modules[name]


def row(body: Any, name: str = "body", content_type: str = "application/json") -> dict[str, Any]:
    return {
        "requestId": b"r1",
        "headers": [],
        "parameters": [{"name": name, "contentType": content_type, "value": body}],
    }


def test_the_plain_archive_has_batch_size_1_and_no_continuous_batching(mar: Path) -> None:
    with zipfile.ZipFile(mar) as unpacked:
        config = yaml.safe_load(unpacked.read("model-config.yaml"))
        manifest = json.loads(unpacked.read("MAR-INF/MANIFEST.json"))
    assert config == {
        "minWorkers": 1,
        "maxWorkers": 1,
        "batchSize": 1,
        "warmupRequests": "tiny_gpt_warmup.json",
        "handler": {"max_new_tokens": BUDGET},
    }
    assert manifest["model"]["handler"] == "tiny_gpt_stream_handler.py"


def test_streams_every_token_but_the_last_as_an_intermediate(service: Any) -> None:
    final = frames.decode(service.predict([row({"prompt": LONG, "max_new_tokens": 9})]))
    intermediates = service.cl_socket.frames
    texts = [frame.rows[0].body.decode() for frame in intermediates] + [final.rows[0].body.decode()]
    assert texts == reference.generate(LONG, 9)
    assert all(frame.rows[0].headers["ts_stream_next"] == "true" for frame in intermediates)
    assert final.code == 200
    assert final.rows[0].headers["ts_stream_next"] == "false"


def test_the_default_budget_and_a_bad_request(service: Any) -> None:
    final = frames.decode(service.predict([row(LONG.encode(), name="data", content_type="")]))
    texts = [frame.rows[0].body.decode() for frame in service.cl_socket.frames] + [
        final.rows[0].body.decode()
    ]
    assert texts == reference.generate(LONG, BUDGET)
    service.cl_socket.frames.clear()
    refused = frames.decode(service.predict([row({"prompt": "x" * 600, "max_new_tokens": 4})]))
    assert refused.rows[0].status_code == 400
    assert "too long" in json.loads(refused.rows[0].body)["message"]
    assert service.cl_socket.frames == []
