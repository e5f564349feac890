"""Round trips through one echo worker: TorchServe's serialization, rows, headers and context."""

import io
import json
import signal
import time
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
import torch
from sluice.envelope import WireProtocol
from sluice.errors import ErrorCode
from sluice.redis import keys
from sluice.registry.records import VersionRecord

from tests.integration.worker.harness import (
    ReplyStream,
    WorkerProcess,
    enqueue,
    job,
    prediction,
    register_sync,
)
from tests.support import models
from tests.support.redis_server import RedisServer

MODEL, VERSION = "echo", "1.0"


@pytest.fixture(scope="module")
def echo(module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VersionRecord]:
    root = tmp_path_factory.mktemp("models")
    spec = models.echo_model(MODEL, VERSION, config="greeting: hello\n")
    record = register_sync(module_redis.url, spec, root, batch_size=4, max_batch_delay_ms=50)
    worker = WorkerProcess(module_redis.url, MODEL, VERSION, root, worker_id="9500").start()
    try:
        worker.wait_ready()
        yield record
    finally:
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.log()


async def _call(
    client: "aioredis.Redis", inputs: dict[str, bytes], **kwargs: object
) -> tuple[str, ReplyStream]:
    replies = await ReplyStream(client).open()
    item = job(MODEL, VERSION, inputs, reply_to=replies.key, **kwargs)  # type: ignore[arg-type]
    await enqueue(client, item)
    return item.job_id, replies


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (b"bytes", b"\x00\x01binary\xff"),
        (b"str", "h\u00e9llo".encode()),
        (
            b"json",
            json.dumps({"echo": "hi", "numbers": [1, 2, 3], "nested": {"ok": True}}, indent=2).encode(),
        ),
    ],
)
async def test_results_are_serialized_like_torchserve(
    echo: VersionRecord, client: "aioredis.Redis", kind: bytes, expected: bytes
) -> None:
    data = {b"bytes": b"\x00\x01binary\xff", b"str": "h\u00e9llo".encode(), b"json": b"hi"}[kind]
    before_ms = int(time.time() * 1000)
    job_id, replies = await _call(client, {"data": data, "kind": kind})
    reply = await replies.final(job_id)
    assert (reply.job_id, reply.seq, reply.final, reply.attempt) == (job_id, 0, True, 1)
    assert before_ms <= reply.started_unix_ms <= int(time.time() * 1000)
    assert (reply.status_code, reply.error_code, reply.message) == (200, "", "")
    assert prediction(reply) == expected


async def test_tensors_come_back_through_torch_save(echo: VersionRecord, client: "aioredis.Redis") -> None:
    job_id, replies = await _call(client, {"data": bytes([3, 1, 2]), "kind": b"tensor"})
    body = prediction(await replies.final(job_id))
    assert torch.equal(torch.load(io.BytesIO(body), weights_only=True), torch.tensor([3, 1, 2]))


async def test_rows_carry_content_types_and_job_headers(
    echo: VersionRecord, client: "aioredis.Redis"
) -> None:
    job_id, replies = await _call(
        client, {"data": b"x", "kind": b"headers"}, headers={"ts_request_sequence_id": "seq-9"}
    )
    headers = json.loads(prediction(await replies.final(job_id)))
    assert headers == {
        "data": {"content-type": ""},
        "kind": {"content-type": ""},
        "ts_request_sequence_id": "seq-9",
    }


async def test_handler_sees_torchserve_context(echo: VersionRecord, client: "aioredis.Redis") -> None:
    job_id, replies = await _call(client, {"kind": b"context"})
    context = json.loads(prediction(await replies.final(job_id)))
    assert context["request_id"] == job_id
    assert context["cwd"] == echo.model_dir
    assert context["system_properties"] == {
        "model_dir": echo.model_dir,
        "gpu_id": None,
        "batch_size": 4,
        "server_name": "MMS",
        "server_version": "0.12.0",
        "limit_max_image_pixels": True,
    }
    assert context["manifest"]["model"]["modelName"] == MODEL
    assert context["model_yaml_config"] == {"greeting": "hello"}
    assert context["torch_threads"] == 1


async def test_jobs_enqueued_together_share_a_batch_but_keep_their_ids(
    echo: VersionRecord, client: "aioredis.Redis"
) -> None:
    replies = await ReplyStream(client).open()
    jobs = [job(MODEL, VERSION, {"kind": b"context"}, reply_to=replies.key) for _ in range(3)]
    await enqueue(client, *jobs)
    got = await replies.finals([j.job_id for j in jobs])
    for item in jobs:
        (reply,) = got[item.job_id]
        context = json.loads(prediction(reply))
        assert context["request_id"] == item.job_id
        assert sorted(context["request_ids"].values()) == sorted(j.job_id for j in jobs)


async def test_row_status_and_response_headers_reach_the_reply(
    echo: VersionRecord, client: "aioredis.Redis"
) -> None:
    job_id, replies = await _call(client, {"data": b"tea", "kind": b"status"})
    reply = await replies.final(job_id)
    assert (reply.status_code, reply.error_code, prediction(reply)) == (418, "", b"tea")
    assert (reply.content_type, reply.reason_phrase) == ("text/plain", "I'm a teapot")
    assert dict(reply.headers) == {"content-type": "text/plain", "x-echo": "yes"}


async def test_describe_jobs_get_the_raw_describe_output(
    echo: VersionRecord, client: "aioredis.Redis"
) -> None:
    job_id, replies = await _call(client, {}, protocol=WireProtocol.DESCRIBE)
    reply = await replies.final(job_id)
    assert reply.error_code == ""
    assert json.loads(reply.payload) == {"description": "echo", "model": MODEL}


async def test_unsupported_protocols_fail_cleanly(echo: VersionRecord, client: "aioredis.Redis") -> None:
    job_id, replies = await _call(client, {}, protocol=4)  # reserved, unused
    reply = await replies.final(job_id)
    assert (reply.error_code, reply.status_code) == (ErrorCode.INTERNAL.value, 500)
    assert "protocol 4" in reply.message


async def test_acked_jobs_leave_the_stream(echo: VersionRecord, client: "aioredis.Redis") -> None:
    job_id, replies = await _call(client, {"data": b"x"})
    await replies.final(job_id)
    stream = keys.job_stream(MODEL, VERSION)
    assert await client.xlen(stream) == 0
    assert (await client.xpending(stream, keys.JOB_GROUP))["pending"] == 0
