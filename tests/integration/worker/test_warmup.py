"""Warm-up before READY in a real worker process on a real Redis: the archive's warm-up requests run
through the handler before the worker announces itself (no READY record meanwhile), so the first
real request finds the handler warm; a warm-up request that raises stops the worker with LOAD_FAILED
and the handler's error in its log."""

import asyncio
import json
import time
from pathlib import Path

import redis.asyncio as aioredis
from sluice.redis import keys
from sluice_worker.exit_codes import ExitCode

from tests.integration.worker.harness import ReplyStream, WorkerProcess, enqueue, job, prediction, register
from tests.support.models import ModelSpec
from tests.support.redis_server import RedisServer

# Counts its calls in calls.log; the first call is slow (a lazy initialisation); "boom" raises.
HANDLER = """\
import json
import time


def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        body = row.get("body", row.get("data"))
        with open("calls.log", "a") as log:
            log.write(json.dumps(body if isinstance(body, (str, dict, list)) else "bytes") + "\\n")
        count = sum(1 for _ in open("calls.log"))
        if count == 1:
            time.sleep(1.5)
        if body == "boom":
            raise RuntimeError("warm-up boom")
        out.append(json.dumps({"calls": count}))
    return out
"""


def warm_model(name: str, requests: list[object]) -> ModelSpec:
    return ModelSpec(
        name=name,
        handler="handler.py",
        files={
            "handler.py": HANDLER,
            "model-config.yaml": "warmupRequests: warmup/requests.json\n",
            "warmup/requests.json": json.dumps(requests),
        },
        config_file="model-config.yaml",
    )


async def test_warm_up_runs_before_the_worker_is_ready(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    record = await register(
        client,
        warm_model("warm", ["hello", {"prompt": "hi"}, "again"]),
        tmp_path,
        warmup_requests="warmup/requests.json",
    )
    calls = Path(record.model_dir) / "calls.log"
    worker = WorkerProcess(module_redis.url, "warm", "1.0", tmp_path).start()
    workers.append(worker)
    deadline = time.monotonic() + 60
    while not calls.exists() or len(calls.read_text().splitlines()) < 3:
        assert time.monotonic() < deadline, worker.log()
        # Warming up: not announced, so no call is sent to it and DescribeModel shows no READY worker.
        assert await client.hlen(keys.workers("warm", "1.0")) == 0
        await asyncio.sleep(0.05)
    worker.wait_ready()
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [
        "hello",
        {"prompt": "hi"},
        "again",
    ]
    replies = await ReplyStream(client).open()
    await enqueue(client, job("warm", "1.0", {"data": b"x"}, reply_to=replies.key, job_id="real"))
    reply = await replies.final("real")
    assert json.loads(prediction(reply)) == {"calls": 4}
    assert "warm-up done" in worker.log()


async def test_a_failing_warm_up_request_stops_the_worker_with_the_handlers_error(
    module_redis: RedisServer, client: "aioredis.Redis", tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    await register(
        client, warm_model("cold", ["fine", "boom"]), tmp_path, warmup_requests="warmup/requests.json"
    )
    worker = WorkerProcess(module_redis.url, "cold", "1.0", tmp_path).start()
    workers.append(worker)
    assert worker.wait(timeout_s=60) == ExitCode.LOAD_FAILED
    log = worker.log()
    assert "warm-up boom" in log
    assert "warm-up request 2 of warmup/requests.json failed" in log
    assert await client.hlen(keys.workers("cold", "1.0")) == 0
