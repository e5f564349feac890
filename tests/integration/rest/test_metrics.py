"""The metrics port: TorchServe's counters fed by gRPC and REST alike, Sluice's cluster gauges read
from Redis at scrape time, the text format and ``?name[]=`` filtering."""

import socket
import time
from collections.abc import AsyncIterator

import aiohttp
import grpc
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply, WireProtocol
from sluice.host_readings import HostReadings
from sluice.redis import keys
from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import register
from tests.integration.rest.conftest import raw
from tests.support.responder import ok


async def answer(job: Job) -> AsyncIterator[Reply]:
    reply = raw(job, job.request) if job.protocol == WireProtocol.TORCHSERVE_REST else ok(job, b"grpc")
    reply.started_unix_ms = job.enqueued_unix_ms + 5  # "queued for 5 ms"
    yield reply


async def scrape(metrics_http: aiohttp.ClientSession, query: str = "") -> str:
    async with metrics_http.get("/metrics" + query) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return (await resp.read()).decode()


def value(text: str, prefix: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line.rsplit(" ", 1)[1])


async def test_grpc_and_rest_count_alike(  # type: ignore[no-untyped-def]
    gateway: Gateway, http, metrics_http, redis_client: aioredis.Redis, responder
) -> None:
    await register(redis_client)
    await responder(answer)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        stub = InferenceAPIsServiceStub(channel)
        await stub.Predictions(PredictionsRequest(model_name="echo", input={"data": b"x"}))
        await stub.Predictions(
            PredictionsRequest(model_name="echo", model_version="1.0", input={"data": b"x"})
        )
    for path in ("/predictions/echo", "/predictions/echo/1.0", "/predictions/nope"):
        async with http.post(path, data=b"x") as resp:
            await resp.read()
    text = await scrape(metrics_http)
    host = socket.gethostname()
    labels = f'{{model_name="echo",model_version="default",hostname="{host}",}}'
    assert (
        "# HELP ts_inference_requests_total Torchserve prometheus counter metric with unit: Count\n" in text
    )
    assert "# TYPE ts_inference_requests_total counter\n" in text
    assert f"ts_inference_requests_total{labels} 2.0\n" in text
    assert value(text, 'ts_inference_requests_total{model_name="echo",model_version="1.0"') == 2.0
    assert "nope" not in text  # unknown models are not counted (TorchServe counts after the lookup)
    assert value(text, f"ts_inference_latency_microseconds{labels}") > 0
    assert value(text, f"ts_queue_latency_microseconds{labels}") == 2 * 5000.0


async def test_name_filter(metrics_http: aiohttp.ClientSession) -> None:
    text = await scrape(metrics_http, "?name[]=ts_inference_requests_total&name[]=sluice_queue_depth")
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert families == ["ts_inference_requests_total", "sluice_queue_depth"]


async def test_cluster_gauges_read_from_redis(  # type: ignore[no-untyped-def]
    metrics_http, redis_client: aioredis.Redis, responder
) -> None:
    await register(redis_client)
    await register(redis_client, version="2.0", default=False)
    await responder(answer, version="1.0")
    await redis_client.xadd(keys.job_stream("echo", "2.0"), {"m": b"queued"})
    await redis_client.hset(keys.batch_sizes("echo", "1.0"), mapping={"1": 3, "4": 2})
    # The manager's autoscaler state, as it keeps it (only version 1.0 has been looked at).
    await redis_client.hset(keys.SCALING, "echo:1.0", '{"desired": 3, "changed_at_s": null}')
    text = await scrape(metrics_http)
    one, two = 'model_name="echo",model_version="1.0",', 'model_name="echo",model_version="2.0",'
    assert f"sluice_queue_depth{{{two}}} 1.0\n" in text
    assert f"sluice_queue_depth{{{one}}} 0.0\n" in text
    assert f"sluice_workers{{{one}}} 1.0\n" in text
    assert f"sluice_workers{{{two}}} 0.0\n" in text
    assert f"sluice_desired_workers{{{one}}} 3.0\n" in text
    assert "sluice_desired_workers{" + two not in text
    assert "# TYPE sluice_batch_size histogram\n" in text
    assert f'sluice_batch_size_bucket{{{one}le="1.0",}} 3.0\n' in text
    assert f'sluice_batch_size_bucket{{{one}le="2.0",}} 3.0\n' in text
    assert f'sluice_batch_size_bucket{{{one}le="4.0",}} 5.0\n' in text
    assert f'sluice_batch_size_bucket{{{one}le="+Inf",}} 5.0\n' in text
    assert f"sluice_batch_size_count{{{one}}} 5.0\n" in text
    assert f"sluice_batch_size_sum{{{one}}} 11.0\n" in text
    assert f"sluice_worker_memory_bytes{{{one}worker=" in text
    assert "GPUUtilization" not in text  # no worker on a GPU


async def test_workers_on_a_gpu_show_torchserves_gpu_gauges(  # type: ignore[no-untyped-def]
    metrics_http, redis_client: aioredis.Redis
) -> None:
    await register(redis_client)
    record = WorkerRecord(
        worker_id="9042",
        pid=1,
        host="gpu-host",
        status=WorkerStatus.READY,
        started_unix_ms=1,
        device="cuda:1",
        gpu=True,
        gpu_id=1,
        memory_bytes=2048,
        gpu_utilization_percent=37.0,
        gpu_memory_utilization_percent=21.0,
        gpu_memory_used_mib=1024.0,
    )
    await redis_client.hset(keys.workers("echo", "1.0"), "9042", record.to_json())
    await redis_client.set(keys.heartbeat("echo", "1.0", "9042"), 1, px=60_000)
    text = await scrape(metrics_http)
    labels = (
        'Level="Host",DeviceId="1",Hostname="gpu-host",model_name="echo",model_version="1.0",worker="9042",'
    )
    assert f"GPUUtilization{{{labels}}} 37.0\n" in text
    assert f"GPUMemoryUsed{{{labels}}} 1024.0\n" in text
    assert f"GPUMemoryUtilization{{{labels}}} 21.0\n" in text
    assert 'sluice_worker_memory_bytes{model_name="echo",model_version="1.0",worker="9042",} 2048.0\n' in text


async def test_metrics_need_no_token_and_stay_up_without_redis(  # type: ignore[no-untyped-def]
    metrics_http, redis_server
) -> None:
    redis_server.kill()
    started = time.monotonic()
    text = await scrape(metrics_http)
    assert "ts_inference_requests_total" in text
    assert "sluice_queue_depth" not in text
    assert time.monotonic() - started < 10


async def test_streamed_calls_are_timed_chunk_by_chunk(  # type: ignore[no-untyped-def]
    http, metrics_http, redis_client: aioredis.Redis, responder
) -> None:
    await register(redis_client)

    async def three_chunks(job: Job) -> AsyncIterator[Reply]:
        for seq in range(3):
            yield raw(job, f"t{seq}".encode(), seq=seq, final=seq == 2, headers={"ts_stream_next": "true"})

    await responder(three_chunks)
    async with http.post("/predictions/echo", data=b"x") as resp:
        assert await resp.read() == b"t0t1t2"
    text = await scrape(metrics_http)
    labels = f'model_name="echo",model_version="default",hostname="{socket.gethostname()}",'
    assert "# TYPE sluice_time_to_first_token_microseconds histogram\n" in text
    assert value(text, f"sluice_time_to_first_token_microseconds_count{{{labels}}}") == 1.0
    assert value(text, f"sluice_time_to_first_token_microseconds_sum{{{labels}}}") > 0
    assert value(text, f"sluice_inter_token_latency_microseconds_count{{{labels}}}") == 2.0
    assert value(text, f'sluice_inter_token_latency_microseconds_bucket{{{labels}le="+Inf",}}') == 2.0
    assert value(text, f"sluice_stream_tokens_total{{{labels}}}") == 3.0


async def test_workers_of_a_generative_version_show_running_requests_and_slots(  # type: ignore[no-untyped-def]
    metrics_http, redis_client: aioredis.Redis
) -> None:
    await register(redis_client, "llm", "1", continuous_batching=True, batch_size=8)
    await register(redis_client, "mlp", "1")
    for model, worker_id in (("llm", "9000"), ("mlp", "9001")):
        record = WorkerRecord(
            worker_id=worker_id, pid=1, host="h", status=WorkerStatus.READY, started_unix_ms=1,
            running=5, slots=8,
        )  # fmt: skip
        await redis_client.hset(keys.workers(model, "1"), worker_id, record.to_json())
        await redis_client.set(keys.heartbeat(model, "1", worker_id), 1, px=60_000)
    text = await scrape(metrics_http)
    assert "# TYPE sluice_worker_running_requests gauge\n" in text
    assert 'sluice_worker_running_requests{model_name="llm",model_version="1",worker="9000",} 5.0\n' in text
    assert 'sluice_worker_slots{model_name="llm",model_version="1",worker="9000",} 8.0\n' in text
    assert 'sluice_worker_running_requests{model_name="mlp"' not in text  # not generative
    assert 'sluice_worker_slots{model_name="mlp"' not in text


async def test_http_responses_count_by_status_class_and_the_queue_time_is_the_last_jobs(  # type: ignore[no-untyped-def]
    http, metrics_http, redis_client: aioredis.Redis, responder
) -> None:
    await register(redis_client)
    await responder(answer)
    for path in ("/predictions/echo", "/predictions/echo", "/predictions/nope"):
        async with http.post(path, data=b"x") as resp:
            await resp.read()
    host = socket.gethostname()
    labels = f'{{Level="Host",Hostname="{host}",}}'
    text = await scrape(metrics_http)
    assert value(text, f"Requests2XX{labels}") == 2.0
    assert value(text, f"Requests4XX{labels}") == 1.0  # the unknown model
    assert f"Requests5XX{labels}" not in text
    assert value(text, f"QueueTime{labels}") == 5.0  # the responder says "queued for 5 ms"
    # The metrics port's own responses count too, as TorchServe's do (the first scrape is in now).
    assert value(await scrape(metrics_http), f"Requests2XX{labels}") == 3.0


async def test_workers_report_their_load_time_and_their_hosts_system_metrics(  # type: ignore[no-untyped-def]
    metrics_http, redis_client: aioredis.Redis
) -> None:
    await register(redis_client)
    readings = HostReadings(
        cpu_percent=12.5,
        memory_used_mib=2048.0,
        memory_available_mib=1024.0,
        memory_percent=66.7,
        disk_used_gib=30.0,
        disk_available_gib=70.0,
        disk_percent=30.0,
    )
    record = WorkerRecord(
        worker_id="9043",
        pid=1,
        host="far-host",
        status=WorkerStatus.READY,
        started_unix_ms=1,
        load_ms=1234,
        host_readings=readings,
    )
    await redis_client.hset(keys.workers("echo", "1.0"), "9043", record.to_json())
    await redis_client.set(keys.heartbeat("echo", "1.0", "9043"), 1, px=60_000)
    text = await scrape(metrics_http)
    far = '{Level="Host",Hostname="far-host",}'
    assert 'WorkerLoadTime{WorkerName="W-9043-echo_1.0",Level="Host",Hostname="far-host",} 1234.0\n' in text
    expected = {
        "CPUUtilization": 12.5,
        "MemoryUsed": 2048.0,
        "MemoryAvailable": 1024.0,
        "MemoryUtilization": 66.7,
        "DiskUsage": 30.0,
        "DiskAvailable": 70.0,
        "DiskUtilization": 30.0,
    }
    assert {name: value(text, f"{name}{far}") for name in expected} == expected
    # The gateway's own host is read at scrape time.
    own = f'{{Level="Host",Hostname="{socket.gethostname()}",}}'
    assert value(text, f"MemoryUsed{own}") > 0
    assert "# HELP DiskUsage Torchserve prometheus gauge metric with unit: Gigabytes\n" in text
