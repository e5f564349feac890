"""Sluice on Redis Sentinel as `sluice start` runs it (a master, two replicas, three Sentinels, all real
processes on loopback): under steady unary and streaming load the master is SIGKILLed twice, and every
call is answered once with its own answer or fails with a clear status within its deadline; inference
serves again after each failover, the registry survives and management works after it; the killed
master rejoins as a replica. With no Sentinel answering, `sluice start` fails at once, naming them."""

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1 import torchserve_management_pb2 as mpb
from sluice.v1 import torchserve_management_pb2_grpc as mpb_grpc

from examples.tiny_gpt.archive import build_archives
from examples.tiny_gpt.reference import generate
from tests.support.cli_stack import Stack
from tests.support.models import echo_model, write_mar
from tests.support.redis_sentinel import MASTER_NAME, SentinelGroup, sentinel_group
from tests.support.redis_server import free_port
from tests.support.steady_load import CLEAR_FAILURES, SteadyLoad, sleeper_model, unclear

CALL_TIMEOUT_S = 20.0
# A call ends by its deadline; this much later counts as a hang (gRPC's own deadline is exact, this
# covers the client thread's scheduling on a loaded machine).
DEADLINE_SLACK_S = 5.0
# Bound of the wait for inference to serve again after a kill (the measured outage is in the bench).
SERVED_AGAIN_TIMEOUT_S = 60.0
STREAM_PROMPTS = ["Hello", "The quick brown fox", "zz top", "xyzzy"]
STREAM_TOKENS = 12


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    with sentinel_group(tmp_path_factory.mktemp("sentinels")) as started:
        yield started


@pytest.fixture(scope="module")
def stack(group: SentinelGroup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    built = Stack.create(
        tmp_path_factory.mktemp("on-sentinel"),
        f"sluice_redis_sentinels={group.addresses}\nsluice_redis_sentinel_master={MASTER_NAME}\n"
        "enable_model_api=true\n",
    )
    write_mar(sleeper_model(config="minWorkers: 2\nmaxWorkers: 2\n"), built.store)
    build_archives(built.store, batch_size=4, max_new_tokens=STREAM_TOKENS, step_delay_ms=20)
    built.start(["sleeper.mar", "tiny_gpt.mar"])
    try:
        yield built
    finally:
        built.stop()


@dataclass(frozen=True)
class Stream:
    prompt: str
    started: float
    ended: float
    tokens: tuple[str, ...] = ()
    error: str = ""


class StreamLoad:
    """One client thread streaming tiny_gpt generations, one after another, until stopped."""

    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.InferenceAPIsServiceStub(self._channel)
        self._stop = threading.Event()
        self.streams: list[Stream] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> list[Stream]:
        self._stop.set()
        self._thread.join(timeout=CALL_TIMEOUT_S + 10)
        self._channel.close()
        return self.streams

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            prompt = STREAM_PROMPTS[number % len(STREAM_PROMPTS)]
            number += 1
            body = json.dumps({"prompt": prompt, "max_new_tokens": STREAM_TOKENS}).encode()
            request = pb.PredictionsRequest(model_name="tiny_gpt", input={"data": body})
            started, tokens = time.monotonic(), []
            try:
                tokens = [
                    reply.prediction.decode()
                    for reply in self._stub.StreamPredictions(request, timeout=CALL_TIMEOUT_S)
                ]
                self.streams.append(Stream(prompt, started, time.monotonic(), tuple(tokens)))
            except grpc.RpcError as err:
                error = f"{err.code().name}: {err.details()}"
                self.streams.append(Stream(prompt, started, time.monotonic(), tuple(tokens), error))


def served_again_after(load: SteadyLoad, killed_at: float) -> float:
    """Seconds from the kill to the start of the first call answered after it."""
    deadline = time.monotonic() + SERVED_AGAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        answered = [call.started for call in load.calls() if call.ok and call.started > killed_at]
        if answered:
            return min(answered) - killed_at
        time.sleep(0.05)
    raise AssertionError(f"inference did not serve again within {SERVED_AGAIN_TIMEOUT_S} s of the kill")


def test_every_call_is_answered_once_or_fails_clearly_across_two_failovers(
    stack: Stack, group: SentinelGroup
) -> None:
    expected = {prompt: tuple(generate(prompt, STREAM_TOKENS)) for prompt in STREAM_PROMPTS}
    outages = []
    with SteadyLoad(stack.grpc_target, "sleeper", clients=4, sleep_s=0.02, timeout_s=CALL_TIMEOUT_S) as load:
        streams = StreamLoad(stack.grpc_target)
        try:
            load.wait_for_calls(20)
            for _ in range(2):
                killed = group.kill_master()
                killed_at = time.monotonic()
                outages.append(served_again_after(load, killed_at))
                group.wait_for_failover(killed.port)
                load.wait_for_calls(20)
                group.rejoin(killed)
        finally:
            stream_log = streams.stop()
        calls = load.stop()
    print(f"served again {[round(o, 2) for o in outages]} s after each kill")
    assert sum(call.ok for call in calls) >= 60
    assert unclear(calls, hang_after_s=CALL_TIMEOUT_S + DEADLINE_SLACK_S) == []
    finished = [stream for stream in stream_log if not stream.error]
    assert finished, "no stream finished"
    assert [s for s in finished if s.tokens != expected[s.prompt]] == []
    failed = [s for s in stream_log if s.error]
    assert [s for s in failed if s.error.split(":", 1)[0] not in CLEAR_FAILURES] == []
    # A failed stream sent a prefix of its answer, never a wrong or repeated token.
    assert [s for s in failed if s.tokens != expected[s.prompt][: len(s.tokens)]] == []


def test_registry_and_management_work_after_failover(stack: Stack, group: SentinelGroup) -> None:
    killed = group.kill_master()
    group.wait_for_failover(killed.port)
    write_mar(echo_model(), stack.store)
    with grpc.insecure_channel(f"127.0.0.1:{stack.management_port}") as channel:
        management = mpb_grpc.ManagementAPIsServiceStub(channel)
        listed = json.loads(management.ListModels(mpb.ListModelsRequest(limit=100), timeout=30).msg)
        assert {model["modelName"] for model in listed["models"]} == {"sleeper", "tiny_gpt"}
        registered = management.RegisterModel(
            mpb.RegisterModelRequest(url="echo.mar", initial_workers=1, synchronous=True), timeout=120
        )
        assert "registered" in registered.msg.lower()
        management.ScaleWorker(
            mpb.ScaleWorkerRequest(model_name="sleeper", min_worker=1, max_worker=1, synchronous=True),
            timeout=120,
        )
        described = json.loads(management.DescribeModel(mpb.DescribeModelRequest(model_name="sleeper")).msg)
        assert described[0]["minWorkers"] == 1
    with grpc.insecure_channel(stack.grpc_target) as channel:
        inference = pb_grpc.InferenceAPIsServiceStub(channel)
        answer = inference.Predictions(
            pb.PredictionsRequest(model_name="echo", input={"data": b"hi"}), timeout=60
        )
        assert answer.prediction
    group.rejoin(killed)


def test_start_fails_at_once_when_no_sentinel_answers(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    listed = ",".join(f"127.0.0.1:{port}" for port in ports)
    stack = Stack.create(tmp_path, f"sluice_redis_sentinels={listed}\nsluice_redis_sentinel_master=main\n")
    started = time.monotonic()
    result = stack.sluice("start", "--disable-token-auth", timeout_s=60)
    assert result.returncode == 1
    assert time.monotonic() - started < 30
    assert all(f"127.0.0.1:{port}" in result.stderr for port in ports), result.stderr
    assert "sluice_redis_sentinels" in result.stderr
    assert not (stack.home / "sluice.pid").exists()
