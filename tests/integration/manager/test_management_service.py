"""The management domain layer against a real Redis, real (fake) worker processes and the real reconcile
loop: register / unregister / scale / set-default / list / describe with TorchServe's messages and
error codes. Operations run through the real OperationRunner, submitted in-process instead of Celery
(the Celery path is covered by the manager process tests)."""

import asyncio
import dataclasses
import json
import random
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from sluice import envelope
from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode, SluiceError
from sluice.redis import keys
from sluice.registry import reader as registry
from sluice.v1 import sluice_management_pb2 as smpb
from sluice.v1 import sluice_management_pb2_grpc as smpb_grpc
from sluice_manager.api.describe_job import DescribeJobs
from sluice_manager.api.grpc_api.server import ManagementGrpcServer
from sluice_manager.api.management import ManagementConfig, ManagementService
from sluice_manager.api.management_calls import RegisterRequest, ScaleRequest
from sluice_manager.api.rest_api.server import create_app
from sluice_manager.models.archives import ExtractionLimits
from sluice_manager.models.fetch import settings_download
from sluice_manager.models.registration import RegistrationConfig
from sluice_manager.models.removal import RemovalConfig
from sluice_manager.models.version_config import RegisterOptions, ServerDefaults
from sluice_manager.operations.op_runner import OperationRunner, RunnerConfig
from sluice_manager.settings import ManagerSettings
from sluice_manager.stores import Stores
from sluice_manager.stores.locks import TokenLock, model_lock
from sluice_manager.stores.operations import OperationStore, OpKind, OpState

from tests.integration.manager.conftest import Harness, StartHarness
from tests.support.eventually import eventually
from tests.support.models import echo_model, write_mar
from tests.support.redis_server import RedisServer

FAST = "fake:\n  ttl_s: 1.0\n"
FAILING = "fake:\n  exit_code: 3\n"


@dataclass
class Api:
    service: ManagementService
    redis: "aioredis.Redis"
    store: Path
    models_dir: Path
    harness: Harness
    tasks: set["asyncio.Task[object]"] = field(default_factory=set)

    def archive(self, name: str, version: str = "1.0", config: str = FAST) -> str:
        write_mar(echo_model(name, version, config=config), self.store)
        return f"{name}.mar"


@pytest.fixture
async def api(
    redis_server: RedisServer, redis_client: "aioredis.Redis", tmp_path: Path, start_harness: StartHarness
) -> AsyncIterator[Api]:
    harness = await start_harness()
    store, models_dir = tmp_path / "store", tmp_path / "home" / "models"
    store.mkdir()
    runner = OperationRunner(
        redis_client,
        RunnerConfig(
            RegistrationConfig(store, models_dir, ExtractionLimits(), ServerDefaults(job_queue_size=20), {}),
            RemovalConfig(models_dir, unregister_timeout_s=10),
        ),
        download=None,
    )
    holder: Api | None = None

    async def submit(op_id: str) -> None:
        task = asyncio.create_task(runner.run(op_id))
        assert holder is not None
        holder.tasks.add(task)

    service = ManagementService(
        Stores.on(redis_client),
        ManagementConfig(host=socket.gethostname(), model_api_enabled=True, poll_interval_s=0.05),
        submit=submit,
        describe_jobs=DescribeJobs(redis_client, redis_server.url),
        wake=harness.reconciler.wake,
        measure_usage=harness.launcher.usage,
    )
    holder = Api(service, redis_client, store, models_dir, harness)
    yield holder
    await service.aclose()
    await asyncio.gather(*holder.tasks, return_exceptions=True)


async def failure(call: "asyncio.Future[object] | object") -> SluiceError:
    with pytest.raises(SluiceError) as info:
        await call  # type: ignore[misc]
    return info.value


async def ready(api: Api, model: str, version: str, count: int) -> bool:
    return len(await registry.live_workers(api.redis, model, version)) == count


async def test_register_with_no_workers_then_list_and_describe(api: Api) -> None:
    url = api.archive("echo", "2.0")
    status = await api.service.register(RegisterRequest(url=url))
    assert (status.message, status.http_status) == (
        'Model "echo" Version: 2.0 registered with 0 initial workers. '
        "Use scale workers API to add workers for the model.",
        200,
    )
    assert await api.service.list_models(100, 0) == {
        "models": [{"modelName": "echo", "modelUrl": "echo.mar"}]
    }
    [entry] = await api.service.describe("echo", None)
    assert (entry["modelVersion"], entry["minWorkers"], entry["workers"]) == ("2.0", 0, [])
    assert entry["jobQueueStatus"] == {"remainingCapacity": 20, "pendingRequests": 0}
    assert not await api.redis.scard(keys.OPEN_OPERATIONS)


async def test_synchronous_register_waits_for_ready_workers(api: Api) -> None:
    url = api.archive("echo")
    status = await api.service.register(RegisterRequest(url=url, initial_workers=2, synchronous=True))
    assert status.message == 'Model "echo" Version: 1.0 registered with 2 initial workers'
    assert await ready(api, "echo", "1.0", 2)
    [entry] = await api.service.describe("echo", "1.0")
    assert [w["status"] for w in entry["workers"]] == ["READY", "READY"]
    assert all(w["pid"] > 0 and w["memoryUsage"] > 0 and w["gpuUsage"] == "N/A" for w in entry["workers"])


async def test_asynchronous_register_answers_at_once(api: Api) -> None:
    status = await api.service.register(
        RegisterRequest(url=api.archive("echo"), initial_workers=1, synchronous=False)
    )
    assert (status.message, status.http_status) == ("Processing worker updates...", 202)
    await eventually(lambda: ready(api, "echo", "1.0", 1), timeout_s=15)


async def test_register_errors(api: Api) -> None:
    url = api.archive("echo")
    await api.service.register(RegisterRequest(url=url))
    duplicate = await failure(api.service.register(RegisterRequest(url=url)))
    assert (duplicate.code, duplicate.message) == (
        ErrorCode.CONFLICT,
        "Model version 1.0 is already registered for model echo",
    )
    missing = await failure(api.service.register(RegisterRequest(url="")))
    assert (missing.code, missing.message) == (ErrorCode.INVALID_ARGUMENT, "Parameter url is required.")
    runtime = await failure(api.service.register(RegisterRequest(url=url, runtime="python4")))
    assert runtime.message == "Invalid RuntimeType value: python4"
    absent = await failure(api.service.register(RegisterRequest(url="nope.mar")))
    assert absent.code is ErrorCode.MODEL_NOT_FOUND
    outside = await failure(api.service.register(RegisterRequest(url="../../etc/passwd")))
    assert outside.code is ErrorCode.INVALID_ARGUMENT
    remote = await failure(api.service.register(RegisterRequest(url="https://example.com/m.mar")))
    assert remote.code is ErrorCode.INVALID_ARGUMENT
    # Nothing half-done: one version, one unpacked folder, no staging folder, no open operation.
    assert len(list(api.models_dir.iterdir())) == 1
    assert not await api.redis.scard(keys.OPEN_OPERATIONS)


async def test_model_api_switch(api: Api) -> None:
    disabled = ManagementService(
        Stores.on(api.redis),
        ManagementConfig(host="h"),
        submit=api.service._submit,
        describe_jobs=api.service._describe_jobs,
    )
    for call in (disabled.register(RegisterRequest(url="x.mar")), disabled.unregister("x", None)):
        error = await failure(call)
        assert (error.code, error.message) == (ErrorCode.MODEL_API_DISABLED, "Model API disabled")
    assert await disabled.list_models(10, 0) == {"models": []}


async def test_scale_up_down_and_errors(api: Api) -> None:
    await api.service.register(RegisterRequest(url=api.archive("echo")))
    await api.redis.hset(keys.RESTARTS, "echo:1.0", '{"failures": 1}')
    status = await api.service.scale(ScaleRequest("echo", None, 2, 2, synchronous=True))
    assert (status.message, status.http_status) == ("Workers scaled to 2 for model: echo", 200)
    assert await ready(api, "echo", "1.0", 2)
    assert await api.redis.hget(keys.RESTARTS, "echo:1.0") is None, "scaling resets the restart backoff"
    status = await api.service.scale(ScaleRequest("echo", "1.0", 1, 1, synchronous=True))
    assert status.message == "Workers scaled to 1 for model: echo, version: 1.0"
    assert await ready(api, "echo", "1.0", 1)
    status = await api.service.scale(ScaleRequest("echo", None, 3, 3))
    assert (status.message, status.http_status) == ("Processing worker updates...", 202)
    await eventually(lambda: ready(api, "echo", "1.0", 3), timeout_s=15)
    bad = await failure(api.service.scale(ScaleRequest("echo", None, 3, 1)))
    assert (bad.code, bad.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "max_worker cannot be less than min_worker.",
    )
    unknown = await failure(api.service.scale(ScaleRequest("nope", None, 1, 1)))
    assert (unknown.code, unknown.message) == (ErrorCode.MODEL_NOT_FOUND, "Model not found: nope")
    version = await failure(api.service.scale(ScaleRequest("echo", "9.9", 1, 1)))
    assert version.message == "Model version: 9.9 does not exist for model: echo"


async def test_scale_timeout_bounds_how_long_the_stopped_workers_may_drain(api: Api) -> None:
    # Its workers take 60 s to end after SIGTERM; the harness's default stop timeout is 5 s.
    await api.service.register(RegisterRequest(url=api.archive("slow", config=FAST + "  drain_s: 60\n")))
    await api.service.scale(ScaleRequest("slow", None, 2, 2, synchronous=True))

    async def scale_down(**options: int) -> float:
        started = time.monotonic()
        status = await api.service.scale(ScaleRequest("slow", None, 1, 1, synchronous=True, **options))
        assert status.message == "Workers scaled to 1 for model: slow"
        return time.monotonic() - started

    async def stop_timeout() -> int | None:
        record = await registry.get_version(api.redis, "slow", "1.0")
        assert record is not None
        return record.stop_timeout_s

    took = await scale_down(stop_timeout_s=2)
    assert 2.0 <= took < 4.5, f"killed after the scale's 2 s, not the default 5 s ({took:.2f} s)"
    assert await stop_timeout() == 2
    await api.service.scale(ScaleRequest("slow", None, 2, 2, synchronous=True))
    assert await stop_timeout() is None, "a scale without timeout restores the default"
    took = await scale_down(stop_timeout_s=0)
    assert took < 2.0, f"timeout 0 stops the surplus worker at once ({took:.2f} s)"
    assert await ready(api, "slow", "1.0", 1)

    gpus = await failure(api.service.scale(ScaleRequest("slow", None, 1, 1, number_gpu=1)))
    assert gpus.code is ErrorCode.INVALID_ARGUMENT
    assert gpus.message.startswith("number_gpu is not supported: ")
    negative = await failure(api.service.scale(ScaleRequest("slow", None, 1, 1, stop_timeout_s=-2)))
    assert negative.code is ErrorCode.INVALID_ARGUMENT
    assert negative.message.startswith("Invalid timeout: -2. ")
    assert await stop_timeout() == 0, "a refused scale changes nothing"
    # The version keeps its stop timeout: unregistering stops its last worker at once too.
    started = time.monotonic()
    await api.service.unregister("slow", None)
    assert time.monotonic() - started < 4.0
    assert not await api.harness.running()


async def test_failing_workers_fail_a_synchronous_register_and_unregister_it(api: Api) -> None:
    url = api.archive("broken", config=FAILING)
    error = await failure(api.service.register(RegisterRequest(url=url, initial_workers=1, synchronous=True)))
    assert (error.code, error.message) == (
        ErrorCode.INTERNAL,
        "Failed to start workers for model broken version: 1.0",
    )
    assert await registry.model_versions(api.redis, "broken") == (None, set())
    assert list(api.models_dir.iterdir()) == []


async def test_versions_default_and_unregister(api: Api) -> None:
    await api.service.register(RegisterRequest(url=api.archive("echo", "1.0")))
    await api.service.register(RegisterRequest(url=api.archive("echo", "2.0")))
    described = await api.service.describe("echo", "all")
    assert [e["modelVersion"] for e in described] == ["1.0", "2.0"]
    assert (await api.service.describe("echo", None))[0]["modelVersion"] == "1.0"
    missing = await failure(api.service.set_default("echo", "7.0"))
    assert (missing.code, missing.message) == (
        ErrorCode.VERSION_NOT_FOUND,
        "Model version 7.0 does not exist for model echo",
    )
    status = await api.service.set_default("echo", "2.0")
    assert status.message == 'Default version successfully updated for model "echo" to "2.0"'
    assert (await api.service.describe("echo", None))[0]["modelVersion"] == "2.0"
    refused = await failure(api.service.unregister("echo", "2.0"))
    assert (refused.code, refused.message) == (
        ErrorCode.FAILED_PRECONDITION,
        "Cannot remove default version for model echo",
    )
    assert (await api.service.unregister("echo", "1.0")).message == 'Model "echo" unregistered'
    assert (await api.service.unregister("echo", None)).message == 'Model "echo" unregistered'
    assert await api.redis.zrange(keys.MODELS, 0, -1) == []
    gone = await failure(api.service.unregister("echo", None))
    assert (gone.code, gone.message) == (ErrorCode.MODEL_NOT_FOUND, "Model not found: echo")
    assert list(api.models_dir.iterdir()) == []


async def test_unregister_answers_queued_jobs_and_removes_every_key(api: Api) -> None:
    await api.service.register(RegisterRequest(url=api.archive("echo"), initial_workers=1, synchronous=True))
    reply_to = keys.reply_stream("test-gateway")
    await api.redis.xadd(reply_to, {"x": "1"})
    for index in range(3):  # the fake worker never reads its stream: these stay queued
        job = Job(job_id=f"job-{index}", protocol=WireProtocol.TORCHSERVE_GRPC, reply_to=reply_to)
        await api.redis.xadd(keys.job_stream("echo", "1.0"), {envelope.FIELD: envelope.encode_job(job)})
    await api.redis.set(keys.cancel("echo", "1.0", "job-0"), b"1", px=60_000)
    await api.service.unregister("echo", None)
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await api.redis.xrange(reply_to))
    replies = [envelope.decode_reply(f[envelope.FIELD]) for _, f in entries[1:]]
    assert [(r.job_id, r.final, r.error_code, r.status_code) for r in replies] == [
        (f"job-{i}", True, "MODEL_NOT_FOUND", 404) for i in range(3)
    ]
    assert replies[0].message == 'Model "echo" version 1.0 was unregistered'
    leftovers = [key async for key in api.redis.scan_iter(match="sluice:*echo*")]
    assert leftovers == []
    assert not await api.redis.hlen(keys.LAUNCHED_WORKERS)


async def test_list_models_pages(api: Api) -> None:
    for name in ("d", "b", "a", "c"):
        await api.service.register(RegisterRequest(url=api.archive(name)))
    first = await api.service.list_models(2, 0)
    assert first == {
        "nextPageToken": "2",
        "models": [{"modelName": "a", "modelUrl": "a.mar"}, {"modelName": "b", "modelUrl": "b.mar"}],
    }
    assert (await api.service.list_models(2, 2))["nextPageToken"] == "4"
    assert await api.service.list_models(2, 4) == {"models": []}
    assert await api.service.list_models(0, 0) == {"nextPageToken": "0", "models": []}
    assert len((await api.service.list_models(100, 0))["models"]) == 4


async def test_describe_errors_and_kserve_v1_readiness(api: Api) -> None:
    assert (await failure(api.service.describe("nope", None))).message == "Model not found: nope"
    await api.service.register(RegisterRequest(url=api.archive("echo")))
    error = await failure(api.service.describe("echo", "3.0"))
    assert (error.code, error.message) == (
        ErrorCode.VERSION_NOT_FOUND,
        "Model version: 3.0 does not exist for model: echo",
    )
    assert await api.service.model_ready("echo") == {"name": "echo", "ready": False}
    no_worker = await failure(api.service.describe("echo", None, customized=True))
    assert no_worker.code is ErrorCode.NO_WORKER
    assert no_worker.message.startswith('Model "echo" has no worker to serve describe request.')
    await api.service.scale(ScaleRequest("echo", None, 1, 1, synchronous=True))
    assert await api.service.model_ready("echo") == {"name": "echo", "ready": True}


async def test_concurrent_operations_on_one_model_keep_the_invariants(api: Api) -> None:
    """T-19: 48 concurrent register / unregister / scale calls on one model, in a random order."""
    url = api.archive("race")
    makers = [
        lambda: api.service.register(RegisterRequest(url=url, initial_workers=1, synchronous=False)),
        lambda: api.service.unregister("race", None),
        lambda: api.service.scale(ScaleRequest("race", None, 2, 2)),
    ]
    order = [index % 3 for index in range(48)]
    random.Random(7).shuffle(order)
    outcomes = await asyncio.gather(*(makers[kind]() for kind in order), return_exceptions=True)
    allowed = {ErrorCode.CONFLICT, ErrorCode.ABORTED, ErrorCode.MODEL_NOT_FOUND, ErrorCode.VERSION_NOT_FOUND}
    for outcome in outcomes:
        assert not isinstance(outcome, Exception) or isinstance(outcome, SluiceError), repr(outcome)
        assert not isinstance(outcome, SluiceError) or outcome.code in allowed, outcome
    assert any(not isinstance(o, Exception) for o in outcomes)
    assert any(isinstance(o, SluiceError) for o in outcomes)
    await asyncio.sleep(1.5)
    await eventually(lambda: _consistent(api), timeout_s=20)


async def _consistent(api: Api) -> bool:
    """Metadata, workers and files agree: every unpacked folder belongs to a registered version, and
    workers run only for registered versions, as many as they want."""
    default, versions = await registry.model_versions(api.redis, "race")
    records = [await registry.get_version(api.redis, "race", v) for v in versions]
    dirs = {r.model_dir for r in records if r is not None}
    on_disk = {str(p) for p in api.models_dir.iterdir()}
    launched = [json.loads(v) for v in (await api.redis.hgetall(keys.LAUNCHED_WORKERS)).values()]
    if on_disk != dirs or any(r is None for r in records):
        return False
    if not versions:
        return not launched and default is None
    live = await registry.live_workers(api.redis, "race", "1.0")
    record = records[0]
    assert record is not None
    return len(live) == record.min_workers == len(launched)


async def test_operation_runner_is_idempotent(api: Api, redis_client: "aioredis.Redis") -> None:
    url = api.archive("echo")
    await api.service.register(RegisterRequest(url=url))
    found = [key async for key in redis_client.scan_iter(match="sluice:manager:op:*")]
    [op_key] = [key for key in found if not key.endswith(b":lease")]
    op_id = op_key.decode().rsplit(":", 1)[-1]
    # The API answered once the operation was finished; the task lets go of its lease just after.
    await eventually(lambda: _released(redis_client, op_id), timeout_s=30)
    runner = OperationRunner(
        redis_client,
        RunnerConfig(
            RegistrationConfig(api.store, api.models_dir, ExtractionLimits(), ServerDefaults(), {}),
            RemovalConfig(api.models_dir),
        ),
        download=None,
    )
    again = await runner.run(op_id)
    assert again is not None
    assert (again.state, again.attempts) == ("done", 1)
    assert len(list(api.models_dir.iterdir())) == 1


async def _released(redis_client: "aioredis.Redis", op_id: str) -> bool:
    return not await redis_client.exists(keys.operation_lease(op_id))


def _runner(api: Api) -> OperationRunner:
    return OperationRunner(
        api.redis,
        RunnerConfig(
            RegistrationConfig(api.store, api.models_dir, ExtractionLimits(), ServerDefaults(), {}),
            RemovalConfig(api.models_dir),
            max_attempts=2,
        ),
        download=None,
    )


async def test_a_retried_registration_recognises_its_own_commit(api: Api) -> None:
    """A task that died after the commit but before closing its operation: the retry finishes it."""
    url = api.archive("echo")
    store = OperationStore(api.redis)
    op = await store.create(OpKind.REGISTER, dataclasses.asdict(RegisterOptions(url=url)))
    op, record = await _runner(api).registrar.run(op)  # registers, as the crashed attempt did
    op = await store.update(op, state=OpState.RUNNING, attempts=1)
    done = await _runner(api).run(op.op_id)
    assert done is not None
    assert (done.state, done.attempts, done.error_code) == (OpState.DONE, 2, "")
    assert [p.name for p in api.models_dir.iterdir()] == [Path(record.model_dir).name]


async def test_an_operation_that_keeps_dying_fails_cleanly(api: Api) -> None:
    url = api.archive("echo")
    store = OperationStore(api.redis)
    op = await store.create(OpKind.REGISTER, dataclasses.asdict(RegisterOptions(url=url)))
    await store.update(op, state=OpState.RUNNING, attempts=2)
    failed = await _runner(api).run(op.op_id)
    assert failed is not None
    assert (failed.state, failed.error_code) == (OpState.FAILED, "INTERNAL")
    assert failed.message == "The operation failed after 2 attempts"
    assert await registry.model_versions(api.redis, "echo") == (None, set())
    assert not await api.redis.scard(keys.OPEN_OPERATIONS)


async def test_an_operation_runs_once_at_a_time(api: Api) -> None:
    store = OperationStore(api.redis)
    op = await store.create(OpKind.UNREGISTER, {"model_name": "nope", "version": ""})
    held = TokenLock(api.redis, keys.operation_lease(op.op_id), ttl_s=5)
    assert await held.acquire()
    assert await _runner(api).run(op.op_id) is None, "another task holds it: skipped"
    await held.release()
    done = await _runner(api).run(op.op_id)
    assert done is not None
    assert (done.state, done.error_code, done.message) == (
        OpState.FAILED,
        "MODEL_NOT_FOUND",
        "Model not found: nope",
    )


async def test_model_lock_refuses_a_second_holder(api: Api) -> None:
    async with model_lock(api.redis, "m", wait_s=0):
        with pytest.raises(SluiceError) as info:
            async with model_lock(api.redis, "m", wait_s=0.2):
                pass
        assert info.value.code is ErrorCode.ABORTED
    async with model_lock(api.redis, "m", wait_s=0):
        pass
    assert not await api.redis.exists(keys.model_lock("m"))


async def _queue_jobs(api: Api, model: str, count: int) -> str:
    reply_to = keys.reply_stream(f"gw-{model}")
    await api.redis.xadd(reply_to, {"x": "1"})
    for index in range(count):
        job = Job(job_id=f"{model}-{index}", protocol=WireProtocol.TORCHSERVE_GRPC, reply_to=reply_to)
        await api.redis.xadd(keys.job_stream(model, "1.0"), {envelope.FIELD: envelope.encode_job(job)})
    return reply_to


async def test_scale_to_zero_answers_the_queued_jobs(api: Api) -> None:
    """T-21: queued jobs of a version scaled to zero get a terminal "no worker" answer, none is dropped."""
    await api.service.register(RegisterRequest(url=api.archive("echo"), initial_workers=1, synchronous=True))
    reply_to = await _queue_jobs(api, "echo", 4)
    status = await api.service.scale(ScaleRequest("echo", None, 0, 0, synchronous=True))
    assert status.message == "Workers scaled to 0 for model: echo"
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await api.redis.xrange(reply_to))
    replies = [envelope.decode_reply(f[envelope.FIELD]) for _, f in entries[1:]]
    assert sorted(r.job_id for r in replies) == [f"echo-{i}" for i in range(4)]
    assert {(r.error_code, r.status_code) for r in replies} == {("NO_WORKER", 503)}
    assert replies[0].message.startswith('Model "echo" has no worker to serve inference request.')
    assert await api.redis.xlen(keys.job_stream("echo", "1.0")) == 0


async def test_set_default_racing_unregister_never_leaves_a_dangling_default(api: Api) -> None:
    """T-20: whichever wins, the default always names a registered version."""
    await api.service.register(RegisterRequest(url=api.archive("echo", "1.0")))
    for _ in range(3):
        await api.service.register(RegisterRequest(url=api.archive("echo", "2.0")))
        await asyncio.gather(
            api.service.set_default("echo", "2.0"),
            api.service.unregister("echo", "2.0"),
            return_exceptions=True,
        )
        default, versions = await registry.model_versions(api.redis, "echo")
        assert default in versions
        if default == "2.0":
            await api.service.set_default("echo", "1.0")
            await api.service.unregister("echo", "2.0")


async def test_register_from_a_url_goes_through_the_downloader(api: Api, tmp_path: Path) -> None:
    """A URL is fetched by ``sluice_manager.models.download`` under ``allowed_urls`` into a private folder,
    never into the model store, and the download is gone once unpacked."""
    elsewhere = tmp_path / "published"
    write_mar(echo_model("remote", config=FAST), elsewhere)
    settings = ManagerSettings(allowed_urls=f"file://{elsewhere}/.*")
    runner = OperationRunner(
        api.redis,
        RunnerConfig(
            RegistrationConfig(api.store, api.models_dir, ExtractionLimits(), ServerDefaults(), {}),
            RemovalConfig(api.models_dir),
        ),
        download=settings_download(settings),
    )
    store = OperationStore(api.redis)
    url = f"file://{elsewhere}/remote.mar"
    op = await store.create(OpKind.REGISTER, dataclasses.asdict(RegisterOptions(url=url)))
    done = await runner.run(op.op_id)
    assert done is not None
    assert (done.state, done.model_name) == (OpState.DONE, "remote"), done.message
    [entry] = await api.service.describe("remote", None)
    assert entry["modelUrl"] == url
    assert sorted(p.name for p in api.store.iterdir()) == [], "nothing written into the model store"
    assert len(list(api.models_dir.iterdir())) == 1, "no download left behind"
    refused = await store.create(OpKind.REGISTER, {"url": "file:///etc/passwd"})
    failed = await runner.run(refused.op_id)
    assert failed is not None
    assert failed.state is OpState.FAILED
    assert "does not match any allowed URL" in failed.message


async def test_an_archive_asking_for_model_parallelism_is_refused_clearly(api: Api) -> None:
    url = api.archive("parallel", config="parallelType: tp\nparallelLevel: 2\nminWorkers: 1\nmaxWorkers: 1\n")
    error = await failure(api.service.register(RegisterRequest(url=url)))
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert "parallelType 'tp' is not supported" in error.message
    assert await api.service.list_models(10, 0) == {"models": []}


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({}, "'warmup.json' is not a file in the archive"),
        ({"warmup.json": "[1, "}, "'warmup.json' is not JSON"),
        ({"warmup.json": '{"prompt": "x"}'}, "must hold a non-empty JSON list"),
    ],
)
async def test_an_archive_with_a_bad_warm_up_file_is_refused_clearly(
    api: Api, files: dict[str, str], problem: str
) -> None:
    spec = echo_model("warm", config=FAST + "warmupRequests: warmup.json\n")
    write_mar(dataclasses.replace(spec, files={**spec.files, **files}), api.store)
    error = await failure(api.service.register(RegisterRequest(url="warm.mar")))
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert "model-config.yaml: warmupRequests:" in error.message
    assert problem in error.message
    assert await api.service.list_models(10, 0) == {"models": []}


async def test_an_archive_with_warm_up_requests_records_them(api: Api) -> None:
    spec = echo_model("warm", config=FAST + "warmupRequests: warmup.json\n")
    write_mar(dataclasses.replace(spec, files={**spec.files, "warmup.json": '["hello"]'}), api.store)
    await api.service.register(RegisterRequest(url="warm.mar"))
    record = await registry.get_version(api.redis, "warm", "1.0")
    assert record is not None
    assert record.warmup_requests == "warmup.json"


async def test_traffic_weights_through_rest_and_grpc(api: Api) -> None:
    for version in ("1.0", "2.0"):
        await api.service.register(RegisterRequest(url=api.archive("echo", version)))
    runner = web.AppRunner(create_app(api.service, max_request_size=1 << 20))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    grpc_server = ManagementGrpcServer(api.service, host="127.0.0.1", port=0, max_request_size=1 << 20)
    grpc_port = await grpc_server.start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{runner.addresses[0][1]}") as rest:
            async with rest.put("/models/echo/set-weights", json={"1.0": 90, "2.0": 10}) as response:
                expected = 'Traffic weights successfully updated for model "echo" to {"1.0": 90, "2.0": 10}'
                assert (response.status, await response.json()) == (200, {"status": expected})
            async with rest.get("/models/echo/all") as response:
                described = await response.json()
            assert [(e["modelVersion"], e["trafficWeight"]) for e in described] == [("1.0", 90), ("2.0", 10)]
            refusals = [
                ("/models/echo/set-weights", b"[90, 10]", 400, "must be a JSON object of version: weight"),
                ("/models/echo/set-weights", b'{"1.0": -1}', 400, "whole number from 0"),
                (
                    "/models/echo/set-weights",
                    b'{"7.0": 1}',
                    404,
                    "Model version 7.0 does not exist for model echo",
                ),
                ("/models/nobody/set-weights", b'{"1.0": 1}', 404, "Model not found: nobody"),
            ]
            for path, body, status, message in refusals:
                async with rest.put(path, data=body) as response:
                    assert response.status == status
                    assert message in (await response.json())["message"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = smpb_grpc.SluiceManagementServiceStub(channel)
            cleared = await stub.SetVersionWeights(smpb.SetVersionWeightsRequest(model_name="echo"))
            assert cleared.msg == 'Traffic weights cleared for model "echo": calls go to its default version'
            assert all("trafficWeight" not in e for e in await api.service.describe("echo", "all"))
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.SetVersionWeights(
                    smpb.SetVersionWeightsRequest(model_name="echo", weights={"7.0": 1})
                )
            assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    finally:
        await grpc_server.stop(0)
        await runner.cleanup()


async def test_unregistering_a_weighted_version_takes_it_out_of_the_weights(api: Api) -> None:
    for version in ("1.0", "2.0", "3.0"):
        await api.service.register(RegisterRequest(url=api.archive("echo", version)))
    await api.service.set_weights("echo", {"1.0": 0, "2.0": 70, "3.0": 30})
    await api.service.unregister("echo", "2.0")
    assert (await registry.model_routing(api.redis, "echo")).weights == {"1.0": 0, "3.0": 30}
    await api.service.unregister("echo", "3.0")
    # Only a zero weight is left: no weights, calls go to the default again.
    assert (await registry.model_routing(api.redis, "echo")).weights == {}
