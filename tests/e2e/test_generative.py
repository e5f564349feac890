"""Generative models as a user meets them: ``sluice start`` with the tiny GPT archives (continuous
batching, and an async handler), real worker processes, real Redis, and every streaming front:
TorchServe gRPC StreamPredictions and StreamPredictions2, REST chunked, KServe v2 ModelInferStream
and ModelStreamInfer, Triton's generate_stream. Every streamed token is checked against the model
run in-process (examples.tiny_gpt.reference)."""

import asyncio
import json
import os
import signal
import struct
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import grpc
import pytest
from sluice.redis import keys
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub

from examples.tiny_gpt.archive import build_archives
from examples.tiny_gpt.reference import generate
from tests.e2e.test_cli import Site
from tests.support.eventually import eventually
from tests.support.redis_server import free_port

CB, ASYNC = "tiny_gpt", "tiny_gpt_async"
# Queued plus running requests a version takes (config.properties job_queue_size).
QUEUE_SIZE = 12
# Prompts whose greedy generation runs to the budget (no early end of text): for streams that must last.
LONG_PROMPTS = ["kserve", "whole", "zz top", "The quick brown fox"]
PROMPTS = ["Hello", "The quick brown fox", "a", "Sluice streams tokens", "0123", "zz top", "Q?", "xyzzy"]


class GenerativeSite(Site):
    rest_port: int = 0
    management_port: int = 0

    def metadata(self) -> tuple[tuple[str, str]]:
        return self.inference_metadata()

    def headers(self) -> dict[str, str]:
        return {"Authorization": self.metadata()[0][1]}

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GenerativeSite]:
    root = tmp_path_factory.mktemp("generative")
    built = GenerativeSite(root, free_port(), free_port())
    built.rest_port = free_port()
    built.management_port = free_port()
    (root / "config.properties").write_text(
        f"grpc_inference_port={built.grpc_port}\n"
        f"grpc_management_port={free_port()}\n"
        f"inference_address=http://127.0.0.1:{built.rest_port}\n"
        f"management_address=http://127.0.0.1:{built.management_port}\n"
        f"metrics_address=http://127.0.0.1:{free_port()}\n"
        f"sluice_redis_port={built.redis_port}\n"
        f"job_queue_size={QUEUE_SIZE}\n"
    )
    # Every token takes 10 ms more: generations last long enough to leave, time out or be killed mid-way.
    build_archives(root / "store", batch_size=8, max_new_tokens=24, step_delay_ms=10)
    started = built.run(
        "start", "--model-store", "store", "--models", "all", "--ts-config", "config.properties"
    )
    assert started.returncode == 0, started.stderr + started.stdout
    try:
        yield built
    finally:
        built.run("stop", timeout_s=120)


def ask(prompt: str, max_new_tokens: int | None = None) -> bytes:
    if max_new_tokens is None:
        return prompt.encode()
    return json.dumps({"prompt": prompt, "max_new_tokens": max_new_tokens}).encode()


def v2_request(
    model: str, prompt: str, max_tokens: int | None = None, request_id: str = ""
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(
        model_name=model,
        id=request_id,
        inputs=[pb.ModelInferRequest.InferInputTensor(name="text_input", datatype="BYTES", shape=[1])],
        raw_input_contents=[struct.pack("<I", len(prompt.encode())) + prompt.encode()],
    )
    if max_tokens is not None:
        request.parameters["max_tokens"].int64_param = max_tokens
    return request


def v2_text(response: pb.ModelInferResponse) -> str:
    [output] = response.outputs
    assert output.name == "text_output"
    raw = response.raw_output_contents[0]
    (length,) = struct.unpack_from("<I", raw)
    return raw[4 : 4 + length].decode()


def grpc_stream(site: GenerativeSite, model: str, body: bytes, timeout_s: float = 60) -> list[str]:
    with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
        stub = InferenceAPIsServiceStub(channel)
        call = stub.StreamPredictions(
            PredictionsRequest(model_name=model, input={"data": body}),
            metadata=site.metadata(),
            timeout=timeout_s,
        )
        return [response.prediction.decode() for response in call]


# ---- Every front streams every token ------------------------------------------------------------


@pytest.mark.parametrize("model", [CB, ASYNC])
def test_stream_predictions_streams_every_token(site: GenerativeSite, model: str) -> None:
    assert grpc_stream(site, model, ask("Hello")) == generate("Hello", 24)
    assert grpc_stream(site, model, ask("Hi there", 7)) == generate("Hi there", 7)


def test_stream_predictions2_streams_every_token(site: GenerativeSite) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
        stub = InferenceAPIsServiceStub(channel)
        requests = iter(
            [PredictionsRequest(model_name=CB, input={"data": ask("bidi", 9)}, sequence_id="s-1")]
        )
        responses = stub.StreamPredictions2(requests, metadata=site.metadata(), timeout=60)
        assert [r.prediction.decode() for r in responses] == generate("bidi", 9)


@pytest.mark.parametrize("model", [CB, ASYNC])
async def test_rest_streams_one_chunk_per_token(site: GenerativeSite, model: str) -> None:
    async with (
        aiohttp.ClientSession(headers=site.headers()) as session,
        session.post(f"{site.rest}/predictions/{model}", data=ask("Hello REST", 12)) as response,
    ):
        assert response.status == 200
        assert response.headers.get("Transfer-Encoding") == "chunked"
        body = b"".join([chunk async for chunk in response.content.iter_any()])
    assert body.decode() == "".join(generate("Hello REST", 12))


@pytest.mark.parametrize("model", [CB, ASYNC])
def test_model_infer_stream_streams_every_token(site: GenerativeSite, model: str) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
        stub = GRPCInferenceServiceStub(channel)
        responses = stub.ModelInferStream(
            v2_request(model, "kserve", 10), metadata=site.metadata(), timeout=60
        )
        assert [v2_text(r) for r in responses] == generate("kserve", 10)


def test_model_stream_infer_streams_every_token_of_several_requests(site: GenerativeSite) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
        stub = GRPCInferenceServiceStub(channel)
        requests = [
            v2_request(CB, prompt, 6 + index, request_id=f"r{index}")
            for index, prompt in enumerate(PROMPTS[:3])
        ]
        got: dict[str, list[str]] = {}
        for response in stub.ModelStreamInfer(iter(requests), metadata=site.metadata(), timeout=60):
            assert not response.error_message
            got.setdefault(response.infer_response.id, []).append(v2_text(response.infer_response))
    assert got == {f"r{index}": generate(prompt, 6 + index) for index, prompt in enumerate(PROMPTS[:3])}


async def test_generate_stream_sends_one_event_per_token(site: GenerativeSite) -> None:
    body = {"text_input": "server sent", "max_tokens": 8}
    async with (
        aiohttp.ClientSession(headers=site.headers()) as session,
        session.post(f"{site.rest}/v2/models/{CB}/generate_stream", json=body) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [
            json.loads(line[len(b"data:") :]) async for line in response.content if line.startswith(b"data:")
        ]
    assert [event["text_output"] for event in events] == generate("server sent", 8)
    assert {event["model_name"] for event in events} == {CB}


# ---- A unary call gets the whole answer ---------------------------------------------------------


@pytest.mark.parametrize("model", [CB, ASYNC])
def test_a_unary_call_gets_every_token_joined(site: GenerativeSite, model: str) -> None:
    expected = "".join(generate("unary", 11))
    with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
        response = InferenceAPIsServiceStub(channel).Predictions(
            PredictionsRequest(model_name=model, input={"data": ask("unary", 11)}),
            metadata=site.metadata(),
            timeout=60,
        )
        assert response.prediction.decode() == expected
        infer = GRPCInferenceServiceStub(channel).ModelInfer(
            v2_request(model, "unary", 11), metadata=site.metadata(), timeout=60
        )
        assert v2_text(infer) == expected


async def test_generate_answers_the_whole_text(site: GenerativeSite) -> None:
    async with (
        aiohttp.ClientSession(headers=site.headers()) as session,
        session.post(
            f"{site.rest}/v2/models/{CB}/generate", json={"text_input": "whole", "max_tokens": 9}
        ) as response,
    ):
        assert response.status == 200
        answer = await response.json()
    assert answer["text_output"] == "".join(generate("whole", 9))


# ---- Concurrency: iteration-level batching -------------------------------------------------------


@pytest.mark.parametrize("model", [CB, ASYNC])
def test_concurrent_streams_each_get_their_exact_tokens(site: GenerativeSite, model: str) -> None:
    budgets = [5 + 3 * index for index in range(len(PROMPTS))]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        streams = list(
            pool.map(lambda pb_: grpc_stream(site, model, ask(*pb_)), zip(PROMPTS, budgets, strict=True))
        )
    assert streams == [generate(prompt, budget) for prompt, budget in zip(PROMPTS, budgets, strict=True)]


def test_continuous_batching_runs_several_requests_per_handler_call(site: GenerativeSite) -> None:
    client = site.redis()
    before = {int(size): int(count) for size, count in client.hgetall(keys.batch_sizes(CB, "1.0")).items()}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda prompt: grpc_stream(site, CB, ask(prompt, 40)), PROMPTS))
    time.sleep(1.5)  # batch sizes are written at most once a second
    after = {int(size): int(count) for size, count in client.hgetall(keys.batch_sizes(CB, "1.0")).items()}
    multi = sum(count - before.get(size, 0) for size, count in after.items() if size > 1)
    assert multi > 0, after


# ---- Clients leaving, deadlines, queue limits, a worker killed ------------------------------------


def worker_running(site: GenerativeSite, model: str) -> int:
    records = site.redis().hgetall(keys.workers(model, "1.0")).values()
    return sum(int(json.loads(raw).get("running", 0)) for raw in records)


@pytest.mark.parametrize("model", [CB, ASYNC])
async def test_a_client_that_goes_away_frees_its_slot(site: GenerativeSite, model: str) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{site.grpc_port}")
    try:
        call = InferenceAPIsServiceStub(channel).StreamPredictions(
            PredictionsRequest(model_name=model, input={"data": ask("kserve", 480)}),
            metadata=site.metadata(),
        )
        got = 0
        async for _response in call:
            got += 1
            if got == 3:
                break
        await eventually(lambda: worker_running(site, model) == 1, timeout_s=5)
        call.cancel()
    finally:
        await channel.close()
    await eventually(lambda: worker_running(site, model) == 0, timeout_s=5)


def test_a_stream_past_its_deadline_ends_with_deadline_exceeded_after_an_exact_prefix(
    site: GenerativeSite,
) -> None:
    expected = generate("whole", 450)
    got: list[str] = []
    with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
        call = InferenceAPIsServiceStub(channel).StreamPredictions(
            PredictionsRequest(model_name=CB, input={"data": ask("whole", 450)}),
            metadata=site.metadata(),
            timeout=0.3,
        )
        with pytest.raises(grpc.RpcError) as raised:
            got.extend(response.prediction.decode() for response in call)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert got == expected[: len(got)]


async def test_past_the_queue_size_requests_are_refused_at_once(site: GenerativeSite) -> None:
    def queued() -> int:
        return int(site.redis().xlen(keys.job_stream(CB, "1.0")))

    # A job an earlier test left (a call past its deadline the worker has not yet dropped) would take
    # a place in the queue, refuse one of the calls below, then leave: start from an empty queue.
    await eventually(lambda: queued() == 0, timeout_s=30)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{site.grpc_port}")
    stub = InferenceAPIsServiceStub(channel)
    long = PredictionsRequest(model_name=CB, input={"data": ask("kserve", 480)})
    calls = [stub.StreamPredictions(long, metadata=site.metadata()) for _ in range(QUEUE_SIZE)]
    # grpc.aio sends a call once it is read from.
    readers = [asyncio.create_task(call.read()) for call in calls]
    try:
        # Each call counts against the queue until it ends. The next call is sent as soon as all are
        # queued: a generation lasts ~5 s, and on a loaded machine the first could end while the
        # worker's slots were still filling, leaving room in the queue.
        await eventually(lambda: queued() == QUEUE_SIZE, timeout_s=10)
        refused = stub.StreamPredictions(long, metadata=site.metadata())
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await refused.read()
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Eight run (the worker's slots), the others wait for a slot.
        await eventually(lambda: worker_running(site, CB) == 8, timeout_s=10)
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        await channel.close()
    await eventually(lambda: worker_running(site, CB) == 0, timeout_s=10)


@pytest.mark.parametrize("model", [CB, ASYNC])
def test_a_worker_killed_mid_generation_ends_each_stream_clearly_after_an_exact_prefix(
    site: GenerativeSite, model: str
) -> None:
    prompts = LONG_PROMPTS
    expected = {prompt: generate(prompt, 300) for prompt in prompts}
    got: dict[str, list[str]] = {prompt: [] for prompt in prompts}
    errors: dict[str, grpc.StatusCode] = {}

    def streaming(prompt: str) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{site.grpc_port}") as channel:
            call = InferenceAPIsServiceStub(channel).StreamPredictions(
                PredictionsRequest(model_name=model, input={"data": ask(prompt, 300)}),
                metadata=site.metadata(),
                timeout=90,
            )
            try:
                for response in call:
                    got[prompt].append(response.prediction.decode())
            except grpc.RpcError as exc:
                errors[prompt] = exc.code()

    [pid] = [pid for pid in site.worker_pids() if _serves(site, pid, model)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(streaming, prompt) for prompt in prompts]
        deadline = time.monotonic() + 30
        while not all(len(tokens) >= 3 for tokens in got.values()):
            assert time.monotonic() < deadline, got
            time.sleep(0.005)
        os.kill(pid, signal.SIGKILL)
        for future in futures:
            future.result(timeout=120)
    for prompt in prompts:
        assert got[prompt] == expected[prompt][: len(got[prompt])]
        assert got[prompt] == expected[prompt] or errors[prompt] == grpc.StatusCode.UNAVAILABLE
    # The replacement serves.
    assert grpc_stream(site, model, ask("after", 5), timeout_s=90) == generate("after", 5)


def _serves(site: GenerativeSite, pid: int, model: str) -> bool:
    records = site.redis().hgetall(keys.workers(model, "1.0")).values()
    return any(int(json.loads(raw)["pid"]) == pid for raw in records)


def test_workers_report_their_slots_and_describe_says_continuous_batching(site: GenerativeSite) -> None:
    for model in (CB, ASYNC):
        records = site.redis().hgetall(keys.workers(model, "1.0")).values()
        assert [int(json.loads(raw)["slots"]) for raw in records] == [8]
    key = json.loads(site.key_file.read_text())["management"]["key"]
    request = urllib.request.Request(
        f"http://127.0.0.1:{site.management_port}/models/{CB}", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        [described] = json.loads(response.read())
    assert described["continuousBatching"] is True
    assert described["batchSize"] == 8
