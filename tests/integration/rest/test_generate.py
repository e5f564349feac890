"""Triton's generate extension on the real gateway, with a scripted worker answering the KServe v2
jobs it makes: the request rules (declared and undeclared models), the response object, server-sent
events, errors before and after the first event, decoupled models."""

import dataclasses
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from sluice.envelope import Job, Reply, WireProtocol
from sluice.errors import ErrorCode
from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.v1 import kserve_pb2 as pb

from tests.integration.gateway.conftest import register
from tests.support.responder import Responder, failure

Start = Callable[..., Awaitable[Responder]]
LLM = ModelTensors(
    inputs=(
        TensorSpec(name="text_input", datatype="BYTES", shape=(1,)),
        TensorSpec(name="max_tokens", datatype="INT32", shape=(1,), optional=True),
    ),
    outputs=(TensorSpec(name="text_output", datatype="BYTES", shape=(1,)),),
    max_batch_size=4,
)


def answer(job: Job, seq: int, text: str | None, *, final: bool) -> Reply:
    """A ModelInferResponse with BYTES output text_output = ``text`` (no output when None)."""
    request = pb.ModelInferRequest.FromString(job.request)
    response = pb.ModelInferResponse(
        id=request.id, model_name=job.model_name, model_version=job.model_version
    )
    if text is not None:
        response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
        response.raw_output_contents.append(struct.pack("<I", len(text.encode())) + text.encode())
    return Reply(job_id=job.job_id, seq=seq, final=final, attempt=1, payload=response.SerializeToString())


def words(*texts: str | None, fail_after: int | None = None) -> Callable[[Job], AsyncIterator[Reply]]:
    """Each text as a reply, the last one final; or a failure after ``fail_after`` replies."""

    async def script(job: Job) -> AsyncIterator[Reply]:
        for seq, text in enumerate(texts):
            if seq == fail_after:
                yield failure(job, ErrorCode.HANDLER_FAILED, 503, "Prediction failed", seq=seq)
                return
            yield answer(job, seq, text, final=seq == len(texts) - 1)

    return script


def events(body: bytes) -> list[dict[str, Any]]:
    chunks = body.decode().split("\n\n")
    assert chunks[-1] == ""
    assert all(chunk.startswith("data: ") for chunk in chunks[:-1]), chunks
    return [json.loads(chunk[len("data: ") :]) for chunk in chunks[:-1]]


async def test_generate_on_a_model_without_declared_inputs(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    peer = await responder(words("Hello world"))
    body = {
        "text_input": "Hi",
        "id": "r1",
        "max_tokens": 8,
        "parameters": {"temperature": 0.5, "stream": False},
    }
    async with http.post("/v2/models/echo/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("application/json")
        assert await resp.json() == {
            "model_name": "echo",
            "model_version": "1.0",
            "id": "r1",
            "text_output": "Hello world",
        }
    (job,) = peer.jobs
    assert job.protocol == WireProtocol.KSERVE
    assert job.final_only
    request = pb.ModelInferRequest.FromString(job.request)
    assert (request.model_name, request.id) == ("echo", "r1")
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [("text_input", "BYTES", [1])]
    assert request.raw_input_contents == [b"\x02\x00\x00\x00Hi"]
    assert request.parameters["max_tokens"].int64_param == 8  # a scalar: a parameter
    assert request.parameters["temperature"].double_param == 0.5
    assert request.parameters["stream"].HasField("bool_param")


async def test_generate_on_a_declared_model_and_a_named_version(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "llm", "2", tensors=LLM)
    peer = await responder(words("ok"), model="llm", version="2")
    body = {"text_input": "Hi", "max_tokens": 8, "top_p": 0.9}
    async with http.post("/v2/models/llm/versions/2/generate", json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["text_output"] == "ok"
    request = pb.ModelInferRequest.FromString(peer.jobs[0].request)
    assert (request.model_name, request.model_version) == ("llm", "2")
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("text_input", "BYTES", [1, 1]),
        ("max_tokens", "INT32", [1, 1]),
    ]
    assert list(request.parameters) == ["top_p"]


async def test_generate_stream_sends_one_event_per_reply(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    peer = await responder(words("Hel", "lo", "!"))
    async with http.post("/v2/models/echo/generate_stream", json={"text_input": "Hi"}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        received = events(await resp.read())
    assert [event["text_output"] for event in received] == ["Hel", "lo", "!"]
    assert all(event["model_name"] == "echo" for event in received)
    assert not peer.jobs[0].final_only


async def test_errors_before_the_first_event_are_http_errors(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, "llm", "1", tensors=LLM)
    await responder(words("x", fail_after=0), model="llm", version="1")
    cases: list[tuple[str, bytes, int, str]] = [
        ("/v2/models/nope/generate", b"{}", 404, "Model not found: nope"),
        (
            "/v2/models/llm/versions/9/generate_stream",
            b"{}",
            404,
            "Model version: 9 does not exist for model: llm",
        ),
        ("/v2/models/llm/generate", b"[1]", 400, "the generate request must be a JSON object"),
        ("/v2/models/llm/generate_stream", b'{"a": 1, "a": 2}', 400, "'a' is given twice in the request"),
        ("/v2/models/llm/generate", b'{"text_input": ["a", "b", "c", "d", "e"]}', 400, "batch"),
        ("/v2/models/llm/generate_stream", b'{"text_input": "x"}', 503, "Prediction failed"),
        ("/v2/models/llm/generate", b'{"text_input": "x"}', 503, "Prediction failed"),
    ]
    for path, body, status, fragment in cases:
        async with http.post(path, data=body) as resp:
            assert resp.status == status, (path, body, await resp.text())
            assert resp.headers["Content-Type"].startswith("application/json")
            assert fragment in (await resp.json())["error"], (path, body)


async def test_a_failure_after_the_first_event_is_an_error_event(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client)
    await responder(words("a", "b", "c", fail_after=2))
    async with http.post("/v2/models/echo/generate_stream", json={"text_input": "x"}) as resp:
        assert resp.status == 200
        received = events(await resp.read())
    assert [event.get("text_output", event.get("error")) for event in received] == [
        "a",
        "b",
        "Prediction failed",
    ]
    assert list(received[-1]) == ["error"]


async def test_a_decoupled_model_answers_generate_once_and_streams_without_its_end_marker(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    await register(redis_client, tensors=dataclasses.replace(LLM, inputs=(), decoupled=True))
    await responder(words("a", "b", None))  # two chunks, then an end marker without outputs
    async with http.post("/v2/models/echo/generate_stream", json={"text_input": "x"}) as resp:
        assert [event["text_output"] for event in events(await resp.read())] == ["a", "b"]
    # /generate takes the final reply: an end marker alone is not an answer (Triton's error).
    async with http.post("/v2/models/echo/generate", json={"text_input": "x"}) as resp:
        assert resp.status == 500
        assert (await resp.json())["error"].startswith("generate expects model to produce exactly 1 response")


async def test_a_decoupled_generative_model_answers_generate_with_its_joined_reply(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis, responder: Start
) -> None:
    decoupled = dataclasses.replace(LLM, inputs=(), decoupled=True)
    await register(redis_client, tensors=decoupled, continuous_batching=True)
    peer = await responder(words("joined by the worker"))
    async with http.post("/v2/models/echo/generate", json={"text_input": "x"}) as resp:
        assert resp.status == 200
        assert (await resp.json())["text_output"] == "joined by the worker"
    # /infer takes it too, for the same reason (any other decoupled model is refused there).
    request = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}
    async with http.post("/v2/models/echo/infer", json=request) as resp:
        assert resp.status == 200
    assert all(job.final_only for job in peer.jobs)


async def test_infer_still_refuses_a_decoupled_model_that_is_not_generative(
    http: aiohttp.ClientSession, redis_client: aioredis.Redis
) -> None:
    await register(redis_client, tensors=dataclasses.replace(LLM, inputs=(), decoupled=True))
    request = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}
    async with http.post("/v2/models/echo/infer", json=request) as resp:
        assert resp.status == 501
        assert "decoupled" in (await resp.json())["error"]
