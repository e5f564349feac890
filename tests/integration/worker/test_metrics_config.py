"""config.properties ``metrics_config`` reaches the handler, as in TorchServe: a model metric declared
there is in ``context.metrics`` (a handler that gets it answers), and without it the handler meets
TorchServe's default definitions only (its ``get_metric`` fails, the call answers "Prediction failed")."""

from pathlib import Path

import redis.asyncio as aioredis
import ts

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, prediction, register
from tests.support.models import ModelSpec
from tests.support.redis_server import RedisServer

HANDLER = """\
from ts.metrics.metric_type_enum import MetricTypes


def handle(data, context):
    if data is None:
        return None
    histogram = context.metrics.get_metric("SluiceTestLatency", MetricTypes.HISTOGRAM)
    histogram.add_or_update(3.5, [context.model_name, "Model"])
    return ["recorded"] * len(data)
"""
MODEL_METRICS = """
model_metrics:
  histogram:
    - name: SluiceTestLatency
      unit: ms
      dimensions: [*model_name, *level]
"""


def metrics_model(name: str) -> ModelSpec:
    return ModelSpec(name=name, handler="handler.py", files={"handler.py": HANDLER})


async def answer(client: "aioredis.Redis", model: str) -> tuple[int, bytes]:
    replies = await ReplyStream(client).open()
    await enqueue(client, job(model, "1.0", {"data": b"x"}, reply_to=replies.key, job_id=f"{model}-call"))
    reply = await replies.final(f"{model}-call")
    return reply.status_code, prediction(reply) if reply.status_code == 200 else reply.message.encode()


async def test_a_metric_declared_in_metrics_config_is_in_the_handlers_context(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    config = tmp_path / "metrics.yaml"
    default = (Path(ts.__file__).parent / "configs" / "metrics.yaml").read_text()
    config.write_text(default + MODEL_METRICS)
    for name, env in (("declared", {"SLUICE_METRICS_CONFIG": str(config)}), ("undeclared", {})):
        await register(client, metrics_model(name), tmp_path)
        worker = WorkerProcess(module_redis.url, name, "1.0", tmp_path, env=env).start()
        workers.append(worker)
        worker.wait_ready()
    assert await answer(client, "declared") == (200, b"recorded")
    status, message = await answer(client, "undeclared")
    assert (status, message) == (503, b"Prediction failed")
