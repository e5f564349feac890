"""A server started as KServe starts TorchServe: no ``--models``, the models listed in
config.properties' ``model_snapshot`` (KServe's layout: the store beside the config folder). The
snapshot's version is registered with its settings and serves."""

import json
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support import metrics_archive
from tests.support.cli_stack import Stack

MODEL = metrics_archive.MODEL


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("snapshot")
    snapshot = {
        "name": "startup.cfg",
        "modelCount": 1,
        "models": {
            MODEL: {
                "1.0": {"defaultVersion": True, "marName": f"{MODEL}.mar", "minWorkers": 1, "maxWorkers": 2,
                        "batchSize": 4, "maxBatchDelay": 20, "responseTimeout": 60},
            }
        },
    }  # fmt: skip
    properties = (
        f"metrics_config={metrics_archive.metrics_config(root)}\nmodel_snapshot={json.dumps(snapshot)}\n"
    )
    built = Stack.create(root, properties)
    metrics_archive.archive(built.store)
    started = built.sluice("start", "--model-store", "store", "--disable-token-auth")
    if started.returncode != 0:
        raise RuntimeError(f"sluice start failed:\n{started.stdout}\n{started.stderr}")
    try:
        yield built
    finally:
        built.stop()


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=30) as response:
        loaded: dict[str, object] = json.loads(response.read())
    return loaded


def post(url: str, body: bytes, content_type: str) -> bytes:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: bytes = response.read()
    return answer


def test_the_snapshots_version_is_registered_with_its_settings(stack: Stack) -> None:
    [described] = json.loads(
        urllib.request.urlopen(
            f"http://127.0.0.1:{stack.management_http_port}/models/{MODEL}", timeout=30
        ).read()
    )
    assert (described["modelVersion"], described["batchSize"], described["maxBatchDelay"]) == ("1.0", 4, 20)
    assert (described["minWorkers"], described["maxWorkers"]) == (1, 2)


def test_the_model_serves_on_the_inference_port(stack: Stack) -> None:
    base = f"http://127.0.0.1:{stack.http_port}"
    assert get_json(f"{base}/v2/models/{MODEL}/ready") is not None
    assert post(f"{base}/predictions/{MODEL}", b"3", "text/plain") == b"ok"
