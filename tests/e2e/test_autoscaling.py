"""Autoscaling with real processes, as `sluice start` runs them: a burst of load raises a version's
workers toward maxWorkers and idling brings them back to minWorkers; a version with minWorkers 0
scales to zero and its next request is admitted and answered by a worker started for it; an
oscillating load scales a bounded number of times. Timings are shortened per model in its
model-config.yaml (the defaults are seconds to a minute)."""

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.cli_stack import Stack
from tests.support.models import FAST_SCALING, ModelSpec, sleeping_model, write_mar

CALL_TIMEOUT_S = 60.0
# Bounds far above what FAST_SCALING makes happen (up within ~1 s, down ~3 s after the load).
SCALE_BOUND_S = 60.0


def model(name: str, low: int, high: int, sleep_s: float) -> ModelSpec:
    spec = sleeping_model(name, sleep_s=sleep_s)
    config = f"sleep_s: {sleep_s}\nminWorkers: {low}\nmaxWorkers: {high}\n{FAST_SCALING}"
    return ModelSpec(
        name, spec.handler, {**spec.files, "model-config.yaml": config}, config_file="model-config.yaml"
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    started = Stack.create(tmp_path_factory.mktemp("autoscaling"))
    for spec in (model("burst", 1, 3, 0.3), model("sleepy", 0, 1, 0.05), model("wave", 1, 3, 0.2)):
        write_mar(spec, started.store)
    started.start(["burst.mar", "sleepy.mar", "wave.mar"])
    try:
        yield started
    finally:
        started.stop()


def call(target: str, model_name: str, payload: bytes) -> bytes:
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        reply = stub.Predictions(
            pb.PredictionsRequest(model_name=model_name, input={"data": payload}), timeout=CALL_TIMEOUT_S
        )
        return bytes(reply.prediction)


def load(target: str, model_name: str, callers: int, seconds: float) -> list[str]:
    """``callers`` threads calling back to back for ``seconds``; returns what went wrong."""
    problems: list[str] = []
    deadline = time.monotonic() + seconds

    def caller(index: int) -> None:
        sent = 0
        while time.monotonic() < deadline:
            sent += 1
            payload = f"{index}-{sent}".encode()
            try:
                if (answer := call(target, model_name, payload)) != payload:
                    problems.append(f"{payload!r} answered {answer!r}")
            except grpc.RpcError as error:
                problems.append(f"{error.code()}: {error.details()}")

    threads = [threading.Thread(target=caller, args=(index,)) for index in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + CALL_TIMEOUT_S + 10)
    return problems


def wait_for(condition: Callable[[], bool], timeout_s: float = SCALE_BOUND_S) -> float:
    """Seconds until ``condition`` held (fails after ``timeout_s``)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.2)
    return time.monotonic() - started


def scale_events(stack: Stack, model_name: str) -> list[dict[str, object]]:
    events = []
    for line in Path(stack.home, "logs", "manager.log").read_text().splitlines():
        if '"workers scaled"' in line or "workers scaled" in line:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"text": line, "model": model_name if f"model={model_name}" in line else ""}
            if event.get("model") == model_name:
                events.append(event)
    return events


def workers(stack: Stack, model_name: str) -> int:
    return len(stack.worker_pids(model_name))


def test_a_burst_scales_up_and_idling_scales_back_down(stack: Stack) -> None:
    assert workers(stack, "burst") == 1
    scaled_up: list[float] = []
    watcher = threading.Thread(
        target=lambda: scaled_up.append(wait_for(lambda: workers(stack, "burst") == 3))
    )
    watcher.start()
    problems = load(stack.grpc_target, "burst", callers=8, seconds=8)
    watcher.join(timeout=SCALE_BOUND_S)
    assert problems == []
    assert scaled_up, "the burst raised the worker count to maxWorkers"
    down_after_s = wait_for(lambda: workers(stack, "burst") == 1)
    print(f"burst: 3 workers {scaled_up[0]:.1f} s into the load; back to 1 {down_after_s:.1f} s after it")
    events = scale_events(stack, "burst")
    assert 2 <= len(events) <= 4, events


def test_a_version_scales_to_zero_and_its_next_request_is_answered(stack: Stack) -> None:
    wait_for(lambda: workers(stack, "sleepy") == 0)
    started = time.monotonic()
    assert call(stack.grpc_target, "sleepy", b"wake up") == b"wake up"
    cold_s = time.monotonic() - started
    assert workers(stack, "sleepy") == 1
    wait_for(lambda: workers(stack, "sleepy") == 0)
    assert call(stack.grpc_target, "sleepy", b"again") == b"again"
    metrics = (
        urllib.request.urlopen(f"http://127.0.0.1:{stack.metrics_port}/metrics", timeout=10).read().decode()
    )
    cold = [
        line
        for line in metrics.splitlines()
        if line.startswith("sluice_cold_start_requests_total") and "sleepy" in line
    ]
    assert cold, "the cold starts show in the gateway's metrics"
    assert float(cold[0].rsplit(" ", 1)[1]) >= 2
    print(f"sleepy: first call after scaling to zero answered in {cold_s:.2f} s")


def test_an_oscillating_load_scales_a_bounded_number_of_times(stack: Stack) -> None:
    before = len(scale_events(stack, "wave"))
    problems: list[str] = []
    for _ in range(6):  # ~12 s: two busy seconds then a quiet one, under the 3 s scale-down window
        problems += load(stack.grpc_target, "wave", callers=3, seconds=1.5)
        time.sleep(0.5)
    assert problems == []
    during = len(scale_events(stack, "wave")) - before
    assert during <= 2, scale_events(stack, "wave")
