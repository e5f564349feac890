"""A job answering with many intermediate replies (50, written several to a stream entry, as a
generative worker does) then a final one, on every front of the real gateway: each streaming call
relays every reply in order; each unary call gets exactly the final reply, and its job asks for no
chunks (``final_only``)."""

import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply, WireProtocol
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub
from sluice.v1.torchserve_inference_pb2 import PredictionResponse, PredictionsRequest
from sluice_gateway.app import Gateway

from tests.integration.gateway.conftest import register
from tests.support.responder import Responder

if TYPE_CHECKING:
    from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceAsyncStub
    from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceAsyncStub

Start = Callable[..., Awaitable[Responder]]
CHUNKS = 50
PER_ENTRY = 6
TOKENS = [f"tok{n}," for n in range(CHUNKS)]
FINAL = "end."


def payload(job: Job, text: str) -> bytes:
    """``text`` as the protocol's answer: a PredictionResponse, a REST body, a ModelInferResponse."""
    if job.protocol == WireProtocol.TORCHSERVE_GRPC:
        return PredictionResponse(prediction=text.encode()).SerializeToString()
    if job.protocol == WireProtocol.TORCHSERVE_REST:
        return text.encode()
    request = pb.ModelInferRequest.FromString(job.request)
    response = pb.ModelInferResponse(
        id=request.id, model_name=job.model_name, model_version=job.model_version
    )
    response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(struct.pack("<I", len(text)) + text.encode())
    return response.SerializeToString()


async def generative(job: Job) -> AsyncIterator[list[Reply]]:
    texts = [*TOKENS, FINAL]
    replies = [
        Reply(
            job_id=job.job_id,
            seq=seq,
            final=seq == CHUNKS,
            attempt=1,
            status_code=200,
            payload=payload(job, text),
            headers={} if seq == CHUNKS else {"ts_stream_next": "true"},
        )
        for seq, text in enumerate(texts)
    ]
    for start in range(0, len(replies), PER_ENTRY):
        yield replies[start : start + PER_ENTRY]


@pytest.fixture
async def peer(redis_client: aioredis.Redis, responder: Start) -> Responder:
    await register(redis_client)
    return await responder(generative)


@pytest.fixture
def kserve(channel: grpc.aio.Channel) -> "GRPCInferenceServiceAsyncStub":
    return GRPCInferenceServiceStub(channel)


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(f"http://127.0.0.1:{gateway.rest_port}") as session:
        yield session


def streamed(peer: Responder) -> None:
    """Every job the responder got was a streaming call's: it asked for every chunk."""
    assert peer.jobs
    assert not any(job.final_only for job in peer.jobs)


def infer_request(request_id: str = "r") -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name="echo",
        id=request_id,
        inputs=[pb.ModelInferRequest.InferInputTensor(name="text_input", datatype="BYTES", shape=[1])],
        raw_input_contents=[struct.pack("<I", 2) + b"hi"],
    )


def text_of(raw: bytes) -> str:
    response = pb.ModelInferResponse.FromString(raw)
    return response.raw_output_contents[0][4:].decode()


# Streaming fronts --------------------------------------------------------------------------------
async def test_stream_predictions(stub: "InferenceAPIsServiceAsyncStub", peer: Responder) -> None:
    call = stub.StreamPredictions(PredictionsRequest(model_name="echo", input={"data": b"x"}), timeout=10)
    assert [r.prediction.decode() async for r in call] == [*TOKENS, FINAL]
    streamed(peer)


async def test_stream_predictions2(stub: "InferenceAPIsServiceAsyncStub", peer: Responder) -> None:
    requests = [
        PredictionsRequest(model_name="echo", input={"data": b"x"}, sequence_id=name) for name in ("s", "t")
    ]
    call = stub.StreamPredictions2(iter(requests), timeout=10)
    by_sequence: dict[str, list[str]] = {}
    async for response in call:
        by_sequence.setdefault(response.sequence_id, []).append(response.prediction.decode())
    assert by_sequence == {"s": [*TOKENS, FINAL], "t": [*TOKENS, FINAL]}
    streamed(peer)


async def test_rest_predictions_are_chunked(http: aiohttp.ClientSession, peer: Responder) -> None:
    async with http.post("/predictions/echo", data=b"x") as resp:
        assert resp.status == 200
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert resp.headers["ts_stream_next"] == "true"
        assert (await resp.read()).decode() == "".join([*TOKENS, FINAL])
    streamed(peer)


async def test_model_infer_stream(kserve: "GRPCInferenceServiceAsyncStub", peer: Responder) -> None:
    call = kserve.ModelInferStream(infer_request(), timeout=10)
    assert [text_of(r.SerializeToString()) async for r in call] == [*TOKENS, FINAL]
    streamed(peer)


async def test_model_stream_infer(kserve: "GRPCInferenceServiceAsyncStub", peer: Responder) -> None:
    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        for request_id in ("a", "b"):
            yield infer_request(request_id)

    by_id: dict[str, list[tuple[str, bool]]] = {}
    async for response in kserve.ModelStreamInfer(requests(), timeout=10):
        assert not response.error_message
        answer = response.infer_response
        final = answer.parameters["triton_final_response"].bool_param
        by_id.setdefault(answer.id, []).append((text_of(answer.SerializeToString()), final))
    expected = [(token, False) for token in TOKENS] + [(FINAL, True)]
    assert by_id == {"a": expected, "b": expected}
    streamed(peer)


async def test_generate_stream(http: aiohttp.ClientSession, peer: Responder) -> None:
    async with http.post("/v2/models/echo/generate_stream", json={"text_input": "hi"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        body = (await resp.read()).decode()
    events = body.split("\n\n")
    assert events[-1] == ""
    assert all(event.startswith("data: ") for event in events[:-1])
    assert [json.loads(event[len("data: ") :])["text_output"] for event in events[:-1]] == [*TOKENS, FINAL]
    streamed(peer)


# Unary fronts ------------------------------------------------------------------------------------
def final_only(peer: Responder) -> None:
    (job,) = peer.jobs
    assert job.final_only
    assert not job.streaming


async def test_predictions(stub: "InferenceAPIsServiceAsyncStub", peer: Responder) -> None:
    response = await stub.Predictions(PredictionsRequest(model_name="echo", input={"data": b"x"}), timeout=10)
    assert response.prediction.decode() == FINAL
    final_only(peer)


async def test_model_infer(kserve: "GRPCInferenceServiceAsyncStub", peer: Responder) -> None:
    response = await kserve.ModelInfer(infer_request(), timeout=10)
    assert text_of(response.SerializeToString()) == FINAL
    final_only(peer)


async def test_rest_infer(http: aiohttp.ClientSession, peer: Responder) -> None:
    request = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}
    async with http.post("/v2/models/echo/infer", json=request) as resp:
        assert resp.status == 200
        assert (await resp.json())["outputs"][0]["data"] == [FINAL]
    final_only(peer)


async def test_generate(http: aiohttp.ClientSession, peer: Responder) -> None:
    async with http.post("/v2/models/echo/generate", json={"text_input": "hi"}) as resp:
        assert resp.status == 200
        assert await resp.json() == {"model_name": "echo", "model_version": "1.0", "text_output": FINAL}
    final_only(peer)
