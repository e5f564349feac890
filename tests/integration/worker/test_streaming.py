"""Intermediate results (send_intermediate_predict_response, both import paths) reach the reply
stream in order, before the final reply."""

import signal
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

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

MODELS = {"handler_utils": "streamer", "otf": "streamer-otf"}


@pytest.fixture(scope="module")
def streamers(module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("models")
    batching = {"batch_size": 2, "max_batch_delay_ms": 100}
    register_sync(module_redis.url, models.streaming_model(MODELS["handler_utils"]), root, **batching)
    register_sync(module_redis.url, models.streaming_model(MODELS["otf"], otf_import=True), root, **batching)
    workers = [WorkerProcess(module_redis.url, name, "1.0", root).start() for name in MODELS.values()]
    try:
        for worker in workers:
            worker.wait_ready()
        yield
    finally:
        for worker in workers:
            worker.send(signal.SIGTERM)
        for worker in workers:
            assert worker.wait() == 0, worker.log()


@pytest.mark.parametrize("import_path", list(MODELS))
async def test_chunks_arrive_in_order_before_the_final(
    streamers: None, client: "aioredis.Redis", import_path: str
) -> None:
    replies = await ReplyStream(client).open()
    item = job(MODELS[import_path], "1.0", {"chunks": b"3"}, reply_to=replies.key, streaming=True)
    await enqueue(client, item)
    got = (await replies.finals([item.job_id]))[item.job_id]
    assert [(r.seq, r.final) for r in got] == [(0, False), (1, False), (2, False), (3, True)]
    assert [prediction(r) for r in got] == [b"chunk-0", b"chunk-1", b"chunk-2", b"final"]
    assert all(r.error_code == "" and r.status_code == 200 and r.attempt == 1 for r in got)
    assert [r.headers["ts_stream_next"] for r in got] == ["true", "true", "true", "false"]
    assert await replies.more(0.3) == []


async def test_no_intermediate_sends_gives_one_final_reply(streamers: None, client: "aioredis.Redis") -> None:
    replies = await ReplyStream(client).open()
    item = job(MODELS["handler_utils"], "1.0", {"chunks": b"0"}, reply_to=replies.key, streaming=True)
    await enqueue(client, item)
    got = (await replies.finals([item.job_id]))[item.job_id]
    assert [(r.seq, r.final, prediction(r)) for r in got] == [(0, True, b"final")]


async def test_batched_jobs_stream_too(streamers: None, client: "aioredis.Redis") -> None:
    """Job.streaming=False only lets the job share a batch: a TorchServe REST call streams from inside a
    batch, and a unary gRPC call keeps only the final reply (the gateway decides)."""
    replies = await ReplyStream(client).open()
    items = [job(MODELS["handler_utils"], "1.0", {"chunks": b"2"}, reply_to=replies.key) for _ in range(2)]
    await enqueue(client, *items)
    got = await replies.finals([i.job_id for i in items])
    for item in items:
        assert [(r.seq, r.final, prediction(r)) for r in got[item.job_id]] == [
            (0, False, b"chunk-0"),
            (1, False, b"chunk-1"),
            (2, True, b"final"),
        ]


async def test_concurrent_streams_keep_their_own_order(streamers: None, client: "aioredis.Redis") -> None:
    replies = await ReplyStream(client).open()
    items = [
        job(MODELS["otf"], "1.0", {"chunks": b"2"}, reply_to=replies.key, streaming=True) for _ in range(3)
    ]
    await enqueue(client, *items)
    got = await replies.finals([i.job_id for i in items])
    for item in items:
        assert [(r.seq, prediction(r)) for r in got[item.job_id]] == [
            (0, b"chunk-0"),
            (1, b"chunk-1"),
            (2, b"final"),
        ]
