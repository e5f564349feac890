"""config.properties ``metrics_config`` reaches the handler, as in TorchServe: a model metric declared
there is in ``context.metrics`` (a handler that gets it answers), and without it the handler meets
TorchServe's default definitions only (its ``get_metric`` fails, the call answers "Prediction failed")."""

from pathlib import Path

import redis.asyncio as aioredis
import ts
from sluice import handler_metrics as hm
from sluice.redis import keys

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, prediction, register
from tests.support.eventually import eventually
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


async def test_the_worker_writes_what_the_handler_recorded_to_the_versions_metrics_hash(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    config = tmp_path / "metrics.yaml"
    default = (Path(ts.__file__).parent / "configs" / "metrics.yaml").read_text()
    config.write_text(default + MODEL_METRICS)
    await register(client, metrics_model("written"), tmp_path)
    worker = WorkerProcess(
        module_redis.url, "written", "1.0", tmp_path, env={"SLUICE_METRICS_CONFIG": str(config)}
    ).start()
    workers.append(worker)
    worker.wait_ready()
    assert await answer(client, "written") == (200, b"recorded")
    written: dict[str, str] = {}

    async def histogram_written() -> bool:
        raw: dict[bytes, bytes] = await client.hgetall(keys.handler_metrics("written", "1.0"))  # type: ignore[assignment]
        written.update({field.decode(): value.decode() for field, value in raw.items()})
        return any(field.endswith(f',"{hm.SUM_PART}"]') for field in written)

    await eventually(histogram_written, timeout_s=10)
    parsed = {hm.parse_field(field): value for field, value in written.items()}
    [(series, _part)] = [key for key in parsed if key is not None and key[1] == hm.SUM_PART]
    assert (series.name, series.kind, series.unit) == ("SluiceTestLatency", hm.HISTOGRAM, "ms")
    assert [name for name, _value in series.labels] == ["ModelName", "Level", "Hostname"]
    assert float(parsed[(series, hm.SUM_PART)]) == 3.5
    assert parsed[(series, "b11")] == "1"  # 2.5 < 3.5 <= 5.0
    # Declared metrics are announced (the file's second model_metrics section replaced the first).
    declared = {key[0].name for key in parsed if key is not None and key[1] == hm.DECLARED_PART}
    assert declared == {"SluiceTestLatency"}
