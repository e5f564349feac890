"""The KServe runtime (deploy/kserve/cluster-serving-runtime.yaml) as KServe would run it: its
container's image, arguments and environment on a real engine, with KServe's storage layout mounted
read-only at /mnt/models (the archive in model-store/, TorchServe's config.properties in config/ with
a `model_snapshot` and the `inference_address` KServe's TorchServe configs carry, which the runtime's
environment overrides). KServe v2 health and metadata and a KServe v1 prediction answer on 8080."""

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.compose_stack import docker
from tests.support.models import echo_model, write_mar
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.compose, pytest.mark.timeout(600)]

RUNTIME = Path(__file__).resolve().parents[2] / "deploy" / "kserve" / "cluster-serving-runtime.yaml"
IMAGE = "local/sluice-standalone:dev"
READY_S = 240.0
SNAPSHOT = {
    "name": "startup.cfg",
    "modelCount": 1,
    "models": {
        "echo": {"1.0": {"defaultVersion": True, "marName": "echo.mar", "minWorkers": 1, "maxWorkers": 1}}
    },
}
KSERVE_CONFIG = (
    "inference_address=http://0.0.0.0:8085\n"
    "management_address=http://0.0.0.0:8085\n"
    "metrics_address=http://0.0.0.0:8082\n"
    "grpc_inference_port=7070\n"
    "enable_envvars_config=true\n"
    "model_store=/mnt/models/model-store\n"
    f"model_snapshot={json.dumps(SNAPSHOT)}\n"
)


def kserve_container() -> dict[str, Any]:
    runtime = yaml.safe_load(RUNTIME.read_text())
    [container] = runtime["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def http(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not docker("images", "-q", IMAGE, check=False).strip():
        pytest.skip(f"{IMAGE} not built (scripts/compose_images.sh)")
    models = tmp_path_factory.mktemp("kserve-models")
    (models / "model-store").mkdir()
    (models / "config").mkdir()
    write_mar(echo_model(), models / "model-store").chmod(0o644)
    (models / "config" / "config.properties").write_text(KSERVE_CONFIG)
    for path in (models, models / "model-store", models / "config"):
        path.chmod(0o755)
    (models / "config" / "config.properties").chmod(0o644)
    container = kserve_container()
    env = [
        arg
        for item in container["env"]
        for arg in ("-e", f"{item['name']}={item['value'].replace('{{.Labels.serviceEnvelope}}', '')}")
    ]
    port = free_port()
    name = f"sluice-kserve-{port}"
    docker(
        "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8080",
        "-v", f"{models}:/mnt/models:ro", *env, IMAGE, *container["args"],
        timeout_s=120,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while http_status(f"{base}/v2/models/echo/ready") != 200:
            if time.monotonic() > deadline:
                pytest.fail(f"not ready in {READY_S} s:\n{docker('logs', '--tail', '60', name, check=False)}")
            time.sleep(1.0)
        yield base
    finally:
        docker("rm", "-f", name, check=False, timeout_s=120)


def http_status(url: str) -> int:
    try:
        return http(url)[0]
    except OSError:
        return 0


def test_kserve_v2_sees_the_snapshots_model(served: str) -> None:
    assert http(f"{served}/v2/health/ready")[0] == 200
    status, body = http(f"{served}/v2/models/echo")
    assert status == 200
    assert json.loads(body)["name"] == "echo"


def test_a_kserve_v1_prediction_answers(served: str) -> None:
    status, body = http(
        f"{served}/v1/models/echo:predict", json.dumps({"instances": [{"data": "x"}]}).encode()
    )
    assert status == 200, body
