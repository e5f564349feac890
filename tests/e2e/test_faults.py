"""Faults through the whole stack as `sluice start` runs it: every request gets exactly one answer,
failing handlers get TorchServe's errors, broken workers are replaced, other models are unaffected,
and a Redis that crashed is restarted underneath without restarting the rest of Sluice."""

import os
import signal
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.cli_stack import Stack
from tests.support.models import ModelSpec, echo_model, write_mar

# The row's "data" says what to do: ok, raise, exit, hang, sleep:<s>, mark:<tag> (appends the tag to
# executed.log in the model dir, so a test can tell whether a job ran).
FAULT_HANDLER = textwrap.dedent("""
    import os
    import sys
    import time


    def handle(data, context):
        if data is None:
            return None
        out = []
        for row in data:
            command = bytes(row.get("data") or b"").decode()
            if command == "raise":
                raise RuntimeError("boom")
            if command == "exit":
                sys.exit(3)
            if command == "hang":
                time.sleep(3600)
            if command.startswith("sleep:"):
                time.sleep(float(command.split(":")[1]))
            if command.startswith("mark:"):
                with open("executed.log", "a") as log:
                    log.write(command + "\\n")
            out.append(f"{command} pid={os.getpid()}")
        return out
""").lstrip()

FAULT_CONFIG = "responseTimeout: 3\nminWorkers: 2\nmaxWorkers: 2\njobQueueSize: 4\n"


def fault_model() -> ModelSpec:
    return ModelSpec(
        name="faulty",
        handler="handler.py",
        files={"handler.py": FAULT_HANDLER, "model-config.yaml": FAULT_CONFIG},
        config_file="model-config.yaml",
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    built = Stack.create(tmp_path_factory.mktemp("faults"))
    write_mar(fault_model(), built.store)
    write_mar(echo_model(), built.store)
    built.start()
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture(scope="module")
def stub(stack: Stack) -> Iterator[pb_grpc.InferenceAPIsServiceStub]:
    with grpc.insecure_channel(stack.grpc_target) as channel:
        yield pb_grpc.InferenceAPIsServiceStub(channel)


def call(
    stub: pb_grpc.InferenceAPIsServiceStub, command: str, model: str = "faulty", timeout_s: float = 60
) -> str:
    request = pb.PredictionsRequest(model_name=model, input={"data": command.encode()})
    return str(stub.Predictions(request, timeout=timeout_s).prediction.decode())


def error_of(stub: pb_grpc.InferenceAPIsServiceStub, command: str, timeout_s: float = 60) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(stub, command, timeout_s=timeout_s)
    return info.value


def eventually_ok(stub: pb_grpc.InferenceAPIsServiceStub, command: str, timeout_s: float = 60) -> str:
    """The answer to ``command`` once the model serves again (workers being replaced)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(stub, command, timeout_s=10)
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def survivors_of(stack: Stack, before: set[int], *, at_most: int, timeout_s: float = 30) -> set[int]:
    """The pids of ``before`` still announced once no more than ``at_most`` of them are (or at the
    deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        survivors = before & set(stack.worker_pids("faulty").values())
        if len(survivors) <= at_most or time.monotonic() > deadline:
            return survivors
        time.sleep(0.1)


def pid_of(answer: str) -> int:
    return int(answer.rsplit("pid=", 1)[1])


def test_handler_exception_is_prediction_failed_and_the_worker_survives(
    stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub
) -> None:
    before = set(stack.worker_pids("faulty").values())
    error = error_of(stub, "raise")
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert (error.details() or "").startswith("Prediction failed\n")
    assert pid_of(call(stub, "ok")) in before
    assert set(stack.worker_pids("faulty").values()) == before


def test_handler_sys_exit_is_worker_died_and_the_worker_is_replaced(
    stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub
) -> None:
    stack.wait_for_workers("faulty", 2)
    before = set(stack.worker_pids("faulty").values())
    error = error_of(stub, "exit")
    assert error.code() is grpc.StatusCode.INTERNAL
    assert (error.details() or "").startswith("Worker died.\n")
    # The client's error leaves before the dying worker withdraws its record.
    assert len(survivors_of(stack, before, at_most=1)) == 1
    stack.wait_for_workers("faulty", 1, exclude=before)
    assert eventually_ok(stub, "ok").startswith("ok pid=")


def test_handler_past_response_timeout_is_worker_died_and_others_keep_serving(
    stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub
) -> None:
    stack.wait_for_workers("faulty", 2)
    before = set(stack.worker_pids("faulty").values())
    with ThreadPoolExecutor(1) as pool:
        hanging = pool.submit(error_of, stub, "hang")
        # While a worker hangs, another model answers at once.
        for _ in range(5):
            assert call(stub, "hi", model="echo", timeout_s=10) == "hi"
        error = hanging.result(timeout=60)
    assert error.code() is grpc.StatusCode.INTERNAL
    assert (error.details() or "").startswith("Worker died.\n")
    stack.wait_for_workers("faulty", 1, exclude=before)
    assert eventually_ok(stub, "ok").startswith("ok pid=")


def test_kill_9_of_a_worker_with_jobs_in_flight_loses_no_request(
    stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub
) -> None:
    pids = stack.wait_for_workers("faulty", 2)
    commands = [f"sleep:0.5:{i}" for i in range(4)]
    with ThreadPoolExecutor(len(commands)) as pool:
        answers = [pool.submit(call, stub, command) for command in commands]
        time.sleep(0.3)  # both workers are inside a job now, the other two wait in the stream
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        results = [answer.result(timeout=90) for answer in answers]
    # Every call got exactly one answer, and each answer is the one for its own request.
    assert [result.split(" pid=")[0] for result in results] == commands


def test_queue_full_is_rejected_at_once(stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub) -> None:
    stack.wait_for_workers("faulty", 2)
    with ThreadPoolExecutor(6) as pool:
        # 2 running + 4 queued fill jobQueueSize=4 (XLEN counts queued and in-flight jobs).
        busy = [pool.submit(call, stub, "sleep:2") for _ in range(4)]
        time.sleep(0.5)
        started = time.monotonic()
        error = error_of(stub, "ok", timeout_s=30)
        waited_s = time.monotonic() - started
        for answer in busy:
            answer.result(timeout=60)
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (error.details() or "").startswith('Model "faulty" has no worker to serve inference request.')
    assert waited_s < 2, "rejection must not wait for the queue to drain"


def test_a_job_whose_client_gave_up_is_skipped(stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub) -> None:
    stack.wait_for_workers("faulty", 2)
    tag = f"mark:gave-up-{time.monotonic_ns()}"
    with ThreadPoolExecutor(3) as pool:
        busy = [pool.submit(call, stub, "sleep:2") for _ in range(2)]
        time.sleep(0.3)
        error = error_of(stub, tag, timeout_s=0.5)
        for answer in busy:
            answer.result(timeout=60)
    assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert call(stub, "ok").startswith("ok")  # the workers went past the abandoned job
    executed = Path(stack.model_dir("faulty"), "executed.log")
    assert not executed.exists() or tag not in executed.read_text()


def test_a_redis_killed_is_restarted_from_its_aof_and_serving_resumes(
    stack: Stack, stub: pb_grpc.InferenceAPIsServiceStub
) -> None:
    stack.wait_for_workers("faulty", 2)
    assert call(stub, "hi", model="echo") == "hi"
    old_pid = stack.pid_of("redis")
    os.kill(old_pid, signal.SIGKILL)
    # The supervisor starts it again (same config, password and AOF); the services reconnect.
    assert eventually_ok(stub, "ok", timeout_s=60).startswith("ok")
    assert stack.pid_of("redis") != old_pid
    deadline = time.monotonic() + 60
    while True:
        try:
            assert call(stub, "again", model="echo", timeout_s=10) == "again"
            break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
