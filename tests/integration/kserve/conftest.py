"""KServe v2 integration fixtures: a real redis-server, the real gateway on a free port with KServe stubs,
registration helpers, and (for gateway-only behaviour) the scripted responder in place of workers."""

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.redis import keys
from sluice.registry.records import StartupModel, StartupReport
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import make_settings, register
from tests.support.redis_server import RedisServer
from tests.support.responder import Responder, Script

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub

__all__ = ["ADD_ONE", "jobs_queued", "kserve_ok", "register", "startup_report"]

# A declared model: FP32 [-1, 4] in and out, batch dimension up to 8.
ADD_ONE = ModelTensors(
    max_batch_size=8,
    inputs=(TensorSpec(name="INPUT0", datatype="FP32", shape=(4,)),),
    outputs=(TensorSpec(name="OUTPUT0", datatype="FP32", shape=(4,)),),
)


def kserve_ok(job: Job, *, seq: int = 0, final: bool = True, outputs: int = 1) -> Reply:
    """A success reply whose payload is a ModelInferResponse (what a worker builds) with ``outputs``
    FP32 [1] outputs holding ``seq``."""
    request = pb.ModelInferRequest.FromString(job.request)
    response = pb.ModelInferResponse(
        id=request.id, model_name=job.model_name, model_version=job.model_version
    )
    for index in range(outputs):
        response.outputs.add(name=f"OUT{index}", datatype="FP32", shape=[1])
        response.raw_output_contents.append(struct.pack("<f", float(seq)))
    return Reply(
        job_id=job.job_id, seq=seq, final=final, status_code=200, payload=response.SerializeToString()
    )


async def jobs_queued(redis: "aioredis.Redis", model: str, version: str = "1.0") -> int:
    return int(await redis.xlen(keys.job_stream(model, version)))


async def startup_report(redis: "aioredis.Redis", *models: tuple[str, str, int], done: bool = True) -> None:
    report = StartupReport(
        manager_pid=1,
        started_unix_ms=int(time.time() * 1000),
        done=done,
        models=[StartupModel(model_name=m, version=v, min_workers=n) for m, v, n in models],
    )
    await redis.set(keys.STARTUP_REPORT, report.to_json())


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Gateway settings of one test (parametrize ``settings_overrides`` with ``indirect=True``)."""
    return getattr(request, "param", {})


@pytest.fixture
async def gateway(redis_server: RedisServer, settings_overrides: dict[str, Any]) -> AsyncIterator[Gateway]:
    gw = Gateway(make_settings(redis_server.url, **settings_overrides))
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(grace_s=0)


@pytest.fixture
async def channel(gateway: Gateway) -> AsyncIterator[grpc.aio.Channel]:
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}", options=options) as chan:
        yield chan


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> "GRPCInferenceServiceAsyncStub":
    return GRPCInferenceServiceStub(channel)


@pytest.fixture
async def responder(redis_server: RedisServer) -> AsyncIterator[Callable[..., Awaitable[Responder]]]:
    started: list[Responder] = []

    async def start(script: Script, *, model: str = "echo", version: str = "1.0", **kw: Any) -> Responder:
        peer = await Responder(redis_server.url, model, version, script, **kw).start()
        started.append(peer)
        return peer

    yield start
    for peer in started:
        await peer.stop()
    await asyncio.sleep(0)
