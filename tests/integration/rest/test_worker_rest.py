"""TorchServe REST end to end with real workers (``python -m sluice_worker`` running TorchServe's own
``ts`` package): input decoding by content type, multipart and form fields, the handler's headers,
request ids, per-row status, streaming, and batch sizes reaching the metrics."""

import json
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings
from tests.integration.worker.harness import WorkerProcess, register_sync
from tests.support import models
from tests.support.redis_server import RedisServer

# Reports what it got: each input's Python type and value, the row's headers and its request id.
# Header x-mode: teapot sets TorchServe's per-row status, content type and a header.
PROBE_HANDLER = models._source("""
    def _shown(value):
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("latin-1")
        return value


    def handle(data, context):
        if data is None:
            return None
        out = []
        for idx, row in enumerate(data):
            headers = context.get_all_request_header(idx)
            if headers.get("x-mode") == "teapot":
                context.set_response_status(418, "I'm a teapot", idx)
                context.set_response_content_type(idx, "text/plain")
                context.set_response_header(idx, "x-echo", "yes")
                out.append(b"short and stout")
                continue
            out.append({
                "request_id": context.get_request_id(idx),
                "inputs": {k: [type(v).__name__, _shown(v)] for k, v in row.items()},
                "headers": headers,
            })
        return out
""")


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.kill()


@pytest.fixture(scope="module")
def workers(module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("models")
    register_sync(module_redis.url, models._function_model("probe", PROBE_HANDLER), root)
    register_sync(module_redis.url, models.streaming_model("streamer"), root)
    started = [WorkerProcess(module_redis.url, name, "1.0", root).start() for name in ("probe", "streamer")]
    try:
        for worker in started:
            worker.wait_ready()
        yield
    finally:
        for worker in started:
            worker.send(signal.SIGTERM)
        for worker in started:
            assert worker.wait() == 0, worker.log()


@pytest.fixture
async def http(module_redis: RedisServer, workers: None) -> AsyncIterator[aiohttp.ClientSession]:
    gateway = Gateway(make_settings(module_redis.url, heartbeat_interval_s=0.2))
    await gateway.start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{gateway.rest_port}") as session:
            session.metrics_port = gateway.metrics_port
            yield session
    finally:
        await gateway.stop(grace_s=0)


async def probe(http: aiohttp.ClientSession, path: str = "/predictions/probe", **kw: Any) -> dict[str, Any]:
    async with http.post(path, **kw) as resp:
        assert resp.status == 200, await resp.text()
        result: dict[str, Any] = json.loads(await resp.read())
        assert resp.headers["x-request-id"] == result["request_id"]
        return result


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("application/json", b'{"a": [1, 2]}', ["dict", {"a": [1, 2]}]),
        ("text/plain; charset=utf-8", "héllo".encode(), ["str", "héllo"]),
        ("application/octet-stream", b"\x00\x01", ["bytearray", "\x00\x01"]),
    ],
)
async def test_body_decoding(
    http: aiohttp.ClientSession, content_type: str, body: bytes, expected: list[Any]
) -> None:
    result = await probe(http, data=body, headers={"Content-Type": content_type, "X-Custom-Case": "kept"})
    assert result["inputs"] == {"body": expected}
    headers = result["headers"]
    assert headers["body"] == {"content-type": content_type.split(";")[0]}
    assert headers["Content-Type"] == content_type
    assert headers["X-Custom-Case"] == "kept"
    assert (headers["url_path"], headers["explain"]) == ("", "False")


async def test_multipart_one_key_per_part(http: aiohttp.ClientSession) -> None:
    form = aiohttp.FormData()
    form.add_field("data", b"\x00\xffbin", filename="a.bin", content_type="application/octet-stream")
    form.add_field("note", b"some text", filename="n.txt", content_type="text/plain")
    form.add_field("kind", "plain field")
    result = await probe(http, data=form)
    assert result["inputs"] == {
        "data": ["bytearray", "\x00\xffbin"],
        "note": ["str", "some text"],
        "kind": ["bytearray", "plain field"],
    }
    assert result["headers"]["note"] == {"content-type": "text/plain"}
    assert result["headers"]["kind"] == {"content-type": ""}


async def test_form_fields(http: aiohttp.ClientSession) -> None:
    result = await probe(http, data={"a": "1", "b": "x y"})
    assert result["inputs"] == {"a": ["bytearray", "1"], "b": ["bytearray", "x y"]}


async def test_url_path_and_explain(http: aiohttp.ClientSession) -> None:
    result = await probe(http, "/explanations/probe/1.0/extra/path", data=b"")
    assert (result["headers"]["url_path"], result["headers"]["explain"]) == ("extra/path", "True")


async def test_handler_status_on_rest(http: aiohttp.ClientSession) -> None:
    async with http.post("/predictions/probe", data=b"", headers={"x-mode": "teapot"}) as resp:
        assert (resp.status, resp.reason) == (418, "I'm a teapot")
        assert resp.headers["Content-Type"] == "text/plain"
        assert resp.headers["x-echo"] == "yes"
        assert await resp.read() == b"short and stout"


async def test_streaming_handler_is_chunked(http: aiohttp.ClientSession) -> None:
    async with http.post("/predictions/streamer", data={"chunks": "3"}) as resp:
        assert resp.status == 200
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert resp.headers["ts_stream_next"] == "true"
        assert await resp.read() == b"chunk-0chunk-1chunk-2final"


async def test_batch_sizes_reach_the_metrics(http: aiohttp.ClientSession) -> None:
    await probe(http, data=b"x")
    port = http.metrics_port  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        text = await resp.text()
    line = 'sluice_batch_size_count{model_name="probe",model_version="1.0",}'
    (count,) = [float(row.rsplit(" ", 1)[1]) for row in text.splitlines() if row.startswith(line)]
    assert count >= 1
    assert 'ts_queue_latency_microseconds{model_name="probe",model_version="default"' in text
