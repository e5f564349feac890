"""tritonclient.http, unchanged, against Sluice's KServe v2 REST: a gateway and a real worker run as
subprocesses (this tier never imports Sluice's generated protobuf modules)."""

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
import tritonclient.http as httpclient
from sluice.kserve.declaration import parse_model_tensors
from sluice.redis import keys
from sluice.registry.records import StartupReport, VersionRecord
from sluice.registry.store import RegistryStore
from tritonclient.utils import InferenceServerException

from tests.support import kserve_models, stack
from tests.support.models import ModelSpec, write_model_dir
from tests.support.redis_server import RedisServer, free_port

CONFIG = """
sluice:
  max_batch_size: 4
  tensor_handler: true
  inputs:
    - {name: IN, datatype: FP32, shape: [3]}
    - {name: TXT, datatype: BYTES, shape: [-1]}
  outputs:
    - {name: OUT, datatype: FP32, shape: [3]}
    - {name: TXT_OUT, datatype: BYTES, shape: [-1]}
"""
HANDLER = """
def handle(data, context):
    if data is None:
        return None
    return [{"OUT": row["IN"] * 2, "TXT_OUT": row["TXT"]} for row in data]
"""
READY_TIMEOUT_S = 60.0


def _register(redis_url: str, root: Path) -> None:
    import yaml

    spec = ModelSpec(
        name="doubler",
        handler="handler.py",
        files={"handler.py": HANDLER, "model-config.yaml": CONFIG},
        config_file="model-config.yaml",
    )
    record = VersionRecord(
        model_name="doubler",
        version="1.0",
        model_url="doubler.mar",
        model_dir=str(write_model_dir(spec, root / "doubler")),
        handler="handler.py",
        tensors=parse_model_tensors(yaml.safe_load(CONFIG)),
    )

    async def put() -> None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(redis_url)
        try:
            await RegistryStore(client).add(record, make_default=True)
            report = StartupReport(
                manager_pid=os.getpid(), started_unix_ms=int(time.time() * 1000), done=True
            )
            await client.set(keys.STARTUP_REPORT, report.to_json())
        finally:
            await client.aclose()

    asyncio.run(put())


def _wait(condition_s: float, check: Callable[[], bool], what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + condition_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what} not ready:\n" + "\n".join(p.read_text(errors="replace") for p in logs))


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("sluice")
    redis_server = RedisServer(root / "redis")
    redis_server.start()
    _register(redis_server.url, root)
    port = free_port()
    env = {**os.environ, "SLUICE_REDIS_URL": redis_server.url, "SLUICE_LOG_LEVEL": "warning"}
    gateway_env = {
        **env,
        "SLUICE_GRPC_INFERENCE_PORT": str(free_port()),
        "SLUICE_INFERENCE_ADDRESS": f"http://127.0.0.1:{port}",
        "SLUICE_METRICS_ADDRESS": f"http://127.0.0.1:{free_port()}",
        # Protocol tests: no manager runs to create token keys (test_token_auth.py covers tokens).
        "SLUICE_DISABLE_TOKEN_AUTHORIZATION": "true",
    }
    logs = [root / "gateway.log", root / "worker.log"]
    commands = [
        ([sys.executable, "-m", "sluice_gateway"], gateway_env),
        (
            [
                sys.executable,
                "-m",
                "sluice_worker",
                "--model-name",
                "doubler",
                "--model-version",
                "1.0",
                "--torch-threads",
                "1",
            ],
            {**env, "SLUICE_HEARTBEAT_INTERVAL_S": "0.2", "SLUICE_HEARTBEAT_TTL_S": "2"},
        ),
    ]
    processes = []
    for (command, process_env), log in zip(commands, logs, strict=True):
        with log.open("wb") as out:
            processes.append(subprocess.Popen(command, env=process_env, stdout=out, stderr=subprocess.STDOUT))
    stack.register(redis_server.url, kserve_models.echo_json_model(), root)
    echo_json = stack.start_worker(redis_server.url, "echo_json", "1.0", root / "logs")
    client = redis.Redis.from_url(redis_server.url)
    try:
        _wait(READY_TIMEOUT_S, lambda: bool(client.hlen(keys.workers("doubler", "1.0"))), "worker", logs)
        stack.wait_workers_ready(redis_server.url, {"echo_json": echo_json})
        triton = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        _wait(20, triton.is_server_live, "gateway", logs)
        yield f"127.0.0.1:{port}"
    finally:
        client.close()
        echo_json.stop()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        redis_server.kill()


@pytest.fixture
def triton(server_url: str) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server_url)
    try:
        yield client
    finally:
        client.close()


def test_health_and_metadata(triton: httpclient.InferenceServerClient) -> None:
    assert triton.is_server_live()
    assert triton.is_server_ready()
    assert triton.is_model_ready("doubler")
    assert triton.is_model_ready("doubler", "1.0")
    assert not triton.is_model_ready("nope")
    assert triton.get_server_metadata()["name"] == "sluice"
    metadata = triton.get_model_metadata("doubler")
    assert metadata["name"] == "doubler"
    assert metadata["inputs"][0] == {"name": "IN", "datatype": "FP32", "shape": [-1, 3]}
    assert triton.get_model_config("doubler")["max_batch_size"] == 4


def _inputs(binary: bool) -> list[httpclient.InferInput]:
    values = np.array([[1.0, 2.5, -3.0]], dtype=np.float32)
    texts = np.array([[b"a", "héllo".encode()]], dtype=np.object_)
    first = httpclient.InferInput("IN", list(values.shape), "FP32")
    first.set_data_from_numpy(values, binary_data=binary)
    second = httpclient.InferInput("TXT", list(texts.shape), "BYTES")
    second.set_data_from_numpy(texts, binary_data=binary)
    return [first, second]


@pytest.mark.parametrize("binary", [True, False])
def test_infer(triton: httpclient.InferenceServerClient, binary: bool) -> None:
    outputs = [
        httpclient.InferRequestedOutput("OUT", binary_data=binary),
        httpclient.InferRequestedOutput("TXT_OUT", binary_data=binary),
    ]
    result = triton.infer("doubler", _inputs(binary), outputs=outputs, request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUT"), np.array([[2.0, 5.0, -6.0]], dtype=np.float32))
    texts = [
        [t if isinstance(t, bytes) else t.encode() for t in row]
        for row in result.as_numpy("TXT_OUT").tolist()
    ]
    assert texts == [[b"a", "héllo".encode()]]
    assert result.get_response()["id"] == "r-1"


ECHOED = [b"hello", "wörld".encode(), b"\xff\x00\x80"]


def _texts(binary: bool, texts: list[Any]) -> httpclient.InferInput:
    array = np.array([texts], dtype=np.object_)
    tensor = httpclient.InferInput("TXT", list(array.shape), "BYTES")
    return tensor.set_data_from_numpy(array, binary_data=binary)


@pytest.mark.parametrize("binary_output", [True, False])
def test_bytes_echo_gives_back_every_byte(
    triton: httpclient.InferenceServerClient, binary_output: bool
) -> None:
    # JSON cannot carry b"\xff\x00\x80": tritonclient sends it as binary data only, and Sluice answers an
    # output holding it as binary data even when JSON was asked for (tritonclient reads either).
    texts = _texts(True, ["hello", "wörld", b"\xff\x00\x80"])
    for model, inputs, output in [
        ("echo_json", [texts], "OUT_TXT"),
        ("doubler", [_inputs(True)[0], texts], "TXT_OUT"),
    ]:
        outputs = [httpclient.InferRequestedOutput(output, binary_data=binary_output)]
        result = triton.infer(model, inputs, outputs=outputs)
        assert result.as_numpy(output).tolist() == [ECHOED], model


@pytest.mark.parametrize("binary_input", [False, True])
def test_text_reaches_an_oip_handler_as_sent(
    triton: httpclient.InferenceServerClient, binary_input: bool
) -> None:
    outputs = [httpclient.InferRequestedOutput(name, binary_data=False) for name in ("OUT_TXT", "SEEN")]
    result = triton.infer("echo_json", [_texts(binary_input, ["hello", "wörld"])], outputs=outputs)
    assert result.as_numpy("OUT_TXT").tolist() == [["hello", "wörld"]]  # JSON strings both ways
    assert json.loads(result.as_numpy("SEEN")[0]) == {"TXT": ["hello", "wörld"]}


def test_infer_without_requested_outputs_answers_binary(triton: httpclient.InferenceServerClient) -> None:
    result = triton.infer("doubler", _inputs(True), model_version="1.0")
    np.testing.assert_array_equal(result.as_numpy("OUT"), np.array([[2.0, 5.0, -6.0]], dtype=np.float32))


def test_errors(triton: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="nope"):
        triton.infer("nope", _inputs(True))
    bad = httpclient.InferInput("IN", [1, 3], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.int32))
    with pytest.raises(InferenceServerException, match="INT32"):
        triton.infer("doubler", [bad, _inputs(True)[1]])
