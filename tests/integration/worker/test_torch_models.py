"""Real torch models through TorchServe's BaseHandler: TorchScript and eager (model.py + state dict)."""

import json
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

SPECS = {"torchscript": models.torchscript_mlp_model, "eager": models.eager_mlp_model}
ROWS = [[0.1, -0.2, 0.3, 0.4], [1.0, 2.0, -3.0, 0.5], [0.0, 0.0, 0.0, 0.0]]


@pytest.fixture(scope="module")
def mlps(module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("models")
    for kind, build in SPECS.items():
        register_sync(module_redis.url, build(f"mlp-{kind}"), root, batch_size=3, max_batch_delay_ms=200)
    workers = [WorkerProcess(module_redis.url, f"mlp-{kind}", "1.0", root).start() for kind in SPECS]
    try:
        for worker in workers:
            worker.wait_ready()
        yield
    finally:
        for worker in workers:
            worker.send(signal.SIGTERM)
        for worker in workers:
            assert worker.wait() == 0, worker.log()


@pytest.mark.parametrize("kind", list(SPECS))
async def test_mlp_answers_a_batch_like_the_model_itself(
    mlps: None, client: "aioredis.Redis", kind: str
) -> None:
    replies = await ReplyStream(client).open()
    items = [
        job(f"mlp-{kind}", "1.0", {"data": json.dumps(row).encode()}, reply_to=replies.key) for row in ROWS
    ]
    await enqueue(client, *items)
    got = await replies.finals([item.job_id for item in items])
    expected = models.mlp_expected(ROWS)
    for item, want in zip(items, expected, strict=True):
        (reply,) = got[item.job_id]
        assert reply.error_code == "", reply.message
        assert json.loads(prediction(reply)) == pytest.approx(want, abs=1e-5)
