"""Handler failures come back as TorchServe reports them, and the worker keeps serving."""

import signal
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from sluice.errors import ErrorCode
from sluice.redis import keys

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, register_sync
from tests.support import models
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def failing_models(module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("models")
    specs = [
        models.prediction_exception_model("refuser", code=404, message="no such thing"),
        models.failing_model("failing"),
        models.bad_output_model("bad-output"),
    ]
    for spec in specs:
        register_sync(module_redis.url, spec, root, batch_size=2, max_batch_delay_ms=50)
    workers = [WorkerProcess(module_redis.url, spec.name, spec.version, root).start() for spec in specs]
    try:
        for worker in workers:
            worker.wait_ready()
        yield
    finally:
        for worker in workers:
            worker.send(signal.SIGTERM)
        for worker in workers:
            assert worker.wait() == 0, worker.log()


@pytest.mark.parametrize(
    ("model", "inputs", "status", "message"),
    [
        ("refuser", {}, 404, "no such thing"),
        ("failing", {}, 503, "Prediction failed"),
        ("bad-output", {"mode": b"extra"}, 503, "number of batch response mismatched"),
        ("bad-output", {"mode": b"not_list"}, 503, "Invalid model predict output"),
        ("bad-output", {"mode": b"object"}, 503, "Unsupported model output data type."),
    ],
)
async def test_handler_errors_fail_the_whole_batch(
    failing_models: None,
    client: "aioredis.Redis",
    model: str,
    inputs: dict[str, bytes],
    status: int,
    message: str,
) -> None:
    replies = await ReplyStream(client).open()
    items = [job(model, "1.0", inputs, reply_to=replies.key) for _ in range(2)]
    await enqueue(client, *items)
    got = await replies.finals([i.job_id for i in items])
    for item in items:
        (reply,) = got[item.job_id]
        assert (reply.final, reply.error_code, reply.status_code, reply.message) == (
            True,
            ErrorCode.HANDLER_FAILED.value,
            status,
            message,
        )
        assert reply.payload == b""
    # Deterministic failures are not retried: the jobs are gone.
    assert await client.xlen(keys.job_stream(model, "1.0")) == 0
