"""Default exposure (reliability_security.md T-43) as ``sluice start`` runs with TorchServe's defaults:
every listening socket of every Sluice process is on loopback, token authorization is on (the key
file is private), the model API is off, reflection is off, and only health / metrics / the API
description answer without a key."""

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sluice.transport.exposure import is_loopback_host

from tests.support.cli_stack import Stack
from tests.support.management_stack import http
from tests.support.token_matrix import AUTH_FAILED, Method, call_raw


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack.create(tmp_path_factory.mktemp("defaults"))
    result = stack.sluice("start", "--model-store", "store")  # no security flag at all
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tokens           on: keys in" in result.stdout
    try:
        yield stack
    finally:
        stack.stop()


def sluice_processes(stack: Stack) -> list[psutil.Process]:
    found = []
    for entry in json.loads((stack.home / "sluice.pid").read_text())["processes"]:
        process = psutil.Process(int(entry["pid"]))
        found += [process, *process.children(recursive=True)]
    return found


def test_every_listening_socket_is_loopback(started: Stack) -> None:
    listening = [
        (process.name(), conn.laddr.ip, conn.laddr.port)
        for process in sluice_processes(started)
        for conn in process.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    ports = {port for _, _, port in listening}
    for port in (started.grpc_port, started.management_port, started.http_port, started.metrics_port):
        assert port in ports
    assert [entry for entry in listening if not is_loopback_host(entry[1])] == []


def test_the_key_file_is_private_and_in_the_start_folder(started: Stack) -> None:
    key_file: Path = started.root / "key_file.json"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


async def test_only_health_answers_without_a_key(started: Stack) -> None:
    async with grpc.aio.insecure_channel(started.grpc_target) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        ping = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
        assert await call_raw(channel, ping, ()) == (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED)
    assert http("GET", f"http://127.0.0.1:{started.http_port}/ping").status == 400
    assert http("GET", f"http://127.0.0.1:{started.management_http_port}/models").status == 400
    assert http("GET", f"http://127.0.0.1:{started.metrics_port}/metrics").status == 200
    assert http("GET", f"http://127.0.0.1:{started.http_port}/api-description").status == 200


async def test_model_api_and_reflection_are_off(started: Stack) -> None:
    keys = json.loads((started.root / "key_file.json").read_text())
    management = {"Authorization": f"Bearer {keys['management']['key']}"}
    base = f"http://127.0.0.1:{started.management_http_port}"
    answer = http("POST", f"{base}/models?url=https://example.com/a.mar", b"", management)
    assert (answer.status, answer.json()["type"]) == (405, "MethodNotAllowedException")
    assert http("GET", f"{base}/models", None, management).status == 200
    inference = (("authorization", f"Bearer {keys['inference']['key']}"),)
    reflection = Method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", True, True)
    async with grpc.aio.insecure_channel(started.grpc_target) as channel:
        code, details = await call_raw(channel, reflection, inference, timeout_s=30)
    assert code is grpc.StatusCode.UNIMPLEMENTED, (code, details)
