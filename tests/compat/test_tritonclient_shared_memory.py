"""The system shared-memory extension through tritonclient, unchanged: tritonclient.utils.shared_memory
makes the regions, tritonclient.grpc and tritonclient.http register them and name them in requests,
and real workers read the inputs from /dev/shm and write the outputs there. A second gateway on the
same Redis runs with the extension off (its default)."""

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.compat.triton_ready import wait_ready
from tests.support import kserve_models, stack
from tests.support.redis_server import RedisServer, free_port

MODELS = {
    "add_one": kserve_models.add_one_model,
    "echo_tensors": kserve_models.echo_tensors_model,
}
# add_one: INPUT0 FP32 [-1, 4] -> OUTPUT0 (INPUT0 + 1) and PARAMS (BYTES).
X = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], dtype=np.float32)


@dataclass
class Site:
    grpc: str
    http: str
    grpc_off: str
    gateway: stack.Service


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("shm")
    server = RedisServer(root / "redis")
    server.start()
    services: list[stack.Service] = []
    try:
        workers = stack.serve_models(server.url, MODELS, root)
        services += workers.values()
        http_port = free_port()
        gateway, port = stack.start_gateway(
            server.url,
            root / "logs",
            system_shared_memory="true",
            inference_address=f"http://127.0.0.1:{http_port}",
        )
        services.append(gateway)
        off, off_port = stack.start_gateway(server.url, root / "logs")
        services.append(off)
        stack.wait_workers_ready(server.url, workers)
        stack.startup_done(server.url, [(name, "1.0", 1) for name in MODELS])
        for address, service in ((f"127.0.0.1:{port}", gateway), (f"127.0.0.1:{off_port}", off)):
            wait_ready(address, service)
        yield Site(f"127.0.0.1:{port}", f"127.0.0.1:{http_port}", f"127.0.0.1:{off_port}", gateway)
    finally:
        for service in services:
            service.stop()
        server.kill()


@pytest.fixture
def client(site: Site) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(site.grpc)
    try:
        yield client
    finally:
        client.unregister_system_shared_memory()
        client.close()


class Regions:
    """Shared-memory objects made for one test, destroyed after it."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def make(self, name: str, byte_size: int) -> tuple[Any, str]:
        key = f"/sluice-test-{name}-{uuid.uuid4().hex[:8]}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self.handles.append(handle)
        return handle, key


@pytest.fixture
def regions() -> Iterator[Regions]:
    made = Regions()
    try:
        yield made
    finally:
        for handle in made.handles:
            shm.destroy_shared_memory_region(handle)


def _error(call: Any, *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call(*args, **kwargs)
    return caught.value


def _add_one_in_shared_memory(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> tuple[list[grpcclient.InferInput], list[grpcclient.InferRequestedOutput], Any]:
    """INPUT0 and OUTPUT0 in regions "in" and "out"; PARAMS answered in the response."""
    handle_in, key_in = regions.make("in", X.nbytes)
    handle_out, key_out = regions.make("out", X.nbytes)
    shm.set_shared_memory_region(handle_in, [X])
    client.register_system_shared_memory("in", key_in, X.nbytes)
    client.register_system_shared_memory("out", key_out, X.nbytes)
    source = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
    source.set_shared_memory("in", X.nbytes)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("out", X.nbytes)
    return [source], [output, grpcclient.InferRequestedOutput("PARAMS")], handle_out


def test_the_extension_is_announced_only_where_it_is_on(site: Site) -> None:
    on = grpcclient.InferenceServerClient(site.grpc)
    off = grpcclient.InferenceServerClient(site.grpc_off)
    try:
        assert "system_shared_memory" in on.get_server_metadata(as_json=True)["extensions"]
        assert "system_shared_memory" not in off.get_server_metadata(as_json=True)["extensions"]
    finally:
        on.close()
        off.close()


def test_grpc_input_and_output_in_shared_memory(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    inputs, outputs, handle_out = _add_one_in_shared_memory(client, regions)
    result = client.infer("add_one", inputs, outputs=outputs)
    got = shm.get_contents_as_numpy(handle_out, np.float32, list(X.shape))
    np.testing.assert_array_equal(got, X + 1)
    [answered] = [o for o in result.get_response(as_json=True)["outputs"] if o["name"] == "OUTPUT0"]
    assert answered["parameters"]["shared_memory_region"] == {"string_param": "out"}
    assert answered["shape"] == ["2", "4"]
    # PARAMS came in the response, after OUTPUT0's empty place.
    assert result.as_numpy("PARAMS").tolist() == [b"{}"]


def test_regions_at_an_offset_of_one_object(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    handle, key = regions.make("both", 64 + 2 * X.nbytes)
    shm.set_shared_memory_region(handle, [X], offset=64)
    client.register_system_shared_memory("both", key, 2 * X.nbytes, offset=64)
    source = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
    source.set_shared_memory("both", X.nbytes)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("both", X.nbytes, offset=X.nbytes)
    client.infer("add_one", [source], outputs=[output])
    got = shm.get_contents_as_numpy(handle, np.float32, list(X.shape), offset=64 + X.nbytes)
    np.testing.assert_array_equal(got, X + 1)


def test_bytes_and_raw_inputs_beside_one_in_shared_memory(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    words = np.array([b"alpha", b"", b"\x00\xff"], dtype=np.object_)
    serialized = serialize_byte_tensor(words)
    size = len(serialized.item())
    handle, key = regions.make("words", size)
    shm.set_shared_memory_region(handle, [serialized])
    client.register_system_shared_memory("words", key, size)
    shared = grpcclient.InferInput("WORDS", [3], "BYTES")
    shared.set_shared_memory("words", size)
    numbers = np.arange(6, dtype=np.int64).reshape(2, 3)
    sent = grpcclient.InferInput("NUMBERS", [2, 3], "INT64")
    sent.set_data_from_numpy(numbers)
    result = client.infer("echo_tensors", [shared, sent])
    assert result.as_numpy("OUT_WORDS").tolist() == words.tolist()
    assert result.as_numpy("OUT_NUMBERS").tolist() == numbers.tolist()


def test_http_input_and_output_in_shared_memory(site: Site, regions: Regions) -> None:
    client = httpclient.InferenceServerClient(site.http)
    try:
        handle_in, key_in = regions.make("in", X.nbytes)
        handle_out, key_out = regions.make("out", X.nbytes)
        shm.set_shared_memory_region(handle_in, [X])
        client.register_system_shared_memory("in", key_in, X.nbytes)
        client.register_system_shared_memory("out", key_out, X.nbytes)
        status = client.get_system_shared_memory_status()
        assert {(r["name"], r["key"], int(r["byte_size"])) for r in status} == {
            ("in", key_in, X.nbytes),
            ("out", key_out, X.nbytes),
        }
        source = httpclient.InferInput("INPUT0", list(X.shape), "FP32")
        source.set_shared_memory("in", X.nbytes)
        output = httpclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("out", X.nbytes)
        result = client.infer("add_one", [source], outputs=[output])
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle_out, np.float32, list(X.shape)), X + 1)
        [answered] = result.get_response()["outputs"]
        assert answered["parameters"]["shared_memory_region"] == "out"
        assert "data" not in answered
        client.unregister_system_shared_memory("in")
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["out"]
    finally:
        client.unregister_system_shared_memory()
        client.close()


def test_registration_is_seen_by_every_gateway_of_the_cluster(site: Site, regions: Regions) -> None:
    grpc_client = grpcclient.InferenceServerClient(site.grpc)
    http_client = httpclient.InferenceServerClient(site.http)
    try:
        _handle, key = regions.make("seen", 16)
        http_client.register_system_shared_memory("seen", key, 16)
        status = grpc_client.get_system_shared_memory_status("seen", as_json=True)
        assert status["regions"]["seen"]["key"] == key
    finally:
        grpc_client.unregister_system_shared_memory()
        grpc_client.close()
        http_client.close()


def test_registration_errors(client: grpcclient.InferenceServerClient, regions: Regions) -> None:
    _handle, key = regions.make("r", 32)
    client.register_system_shared_memory("r", key, 32)
    twice = _error(client.register_system_shared_memory, "r", key, 32)
    assert "shared memory region 'r' already in manager" in twice.message()
    assert twice.status() == "StatusCode.ALREADY_EXISTS"
    missing = _error(client.register_system_shared_memory, "x", f"/sluice-test-none-{os.getpid()}", 8)
    assert "Unable to open shared memory region" in missing.message()
    assert missing.status() == "StatusCode.INVALID_ARGUMENT"
    beyond = _error(client.register_system_shared_memory, "big", key, 16, offset=17)
    assert "failed to register shared memory region 'big': invalid args" in beyond.message()
    for bad in ("/../etc/passwd", "a/b", "/sem.lock", ""):
        refused = _error(client.register_system_shared_memory, "bad", bad, 8)
        assert refused.status() == "StatusCode.INVALID_ARGUMENT", bad
    unknown = _error(client.get_system_shared_memory_status, "nope")
    assert "Unable to find system shared memory region: 'nope'" in unknown.message()
    assert unknown.status() == "StatusCode.NOT_FOUND"
    assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == ["r"]


def test_inference_errors_name_the_problem(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    handle, key = regions.make("in", X.nbytes)
    shm.set_shared_memory_region(handle, [X])
    client.register_system_shared_memory("in", key, X.nbytes)

    def call(region: str, byte_size: int, offset: int = 0) -> InferenceServerException:
        source = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
        source.set_shared_memory(region, byte_size, offset)
        return _error(client.infer, "add_one", [source])

    unknown = call("nope", X.nbytes)
    assert "Unable to find shared memory region: 'nope'" in unknown.message()
    assert unknown.status() == "StatusCode.NOT_FOUND"
    assert "input byte size mismatch for input 'INPUT0'" in call("in", 8).message()
    assert "Invalid offset + byte size for shared memory region: 'in'" in call("in", X.nbytes, 4).message()
    assert "Invalid offset for shared memory region: 'in'" in call("in", X.nbytes, X.nbytes).message()
    # An output region too small for the answer: the job fails, nothing is written past it.
    _small, small_key = regions.make("small", 8)
    client.register_system_shared_memory("small", small_key, 8)
    source = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
    source.set_shared_memory("in", X.nbytes)
    output = grpcclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("small", 8)
    small = _error(client.infer, "add_one", [source], outputs=[output])
    assert "should be at least 32 bytes to hold the results" in small.message()
    assert small.status() == "StatusCode.INVALID_ARGUMENT"


def test_a_region_shrunk_after_registration_fails_the_call_and_not_the_worker(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    handle, key = regions.make("shrunk", X.nbytes)
    shm.set_shared_memory_region(handle, [X])
    client.register_system_shared_memory("shrunk", key, X.nbytes)
    os.truncate(f"/dev/shm/{key.lstrip('/')}", 8)
    source = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
    source.set_shared_memory("shrunk", X.nbytes)
    refused = _error(client.infer, "add_one", [source])
    assert f"shared memory region '{key}' ends before" in refused.message()
    assert refused.status() == "StatusCode.INVALID_ARGUMENT"
    # The worker is still there: an ordinary call is answered.
    plain = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
    plain.set_data_from_numpy(X)
    np.testing.assert_array_equal(client.infer("add_one", [plain]).as_numpy("OUTPUT0"), X + 1)


def test_an_unregistered_region_is_not_found_by_the_next_call(
    client: grpcclient.InferenceServerClient, regions: Regions
) -> None:
    inputs, outputs, _handle = _add_one_in_shared_memory(client, regions)
    client.infer("add_one", inputs, outputs=outputs)
    client.unregister_system_shared_memory("in")
    gone = _error(client.infer, "add_one", inputs, outputs=outputs)
    assert "Unable to find shared memory region: 'in'" in gone.message()


def test_off_by_default_with_a_message_naming_the_setting(site: Site, regions: Regions) -> None:
    client = grpcclient.InferenceServerClient(site.grpc_off)
    try:
        _handle, key = regions.make("r", 16)
        refused = _error(client.register_system_shared_memory, "r", key, 16)
        assert refused.status() == "StatusCode.UNIMPLEMENTED"
        assert "sluice_system_shared_memory" in refused.message()
        source = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
        source.set_shared_memory("r", X.nbytes)
        assert _error(client.infer, "add_one", [source]).status() == "StatusCode.UNIMPLEMENTED"
    finally:
        client.close()
