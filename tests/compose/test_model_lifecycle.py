"""A model's life in the compose stack: registered by name from the model store through REST, its
workers are containers the manager starts (labelled, confined), scaled up and down (draining), and
removed with the model."""

import json
import time

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.compose_stack import ComposeStack, WorkerContainer, docker, engine_time, exit_codes
from tests.support.steady_load import SteadyLoad

pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

MODEL = "sleeper"


def scale(stack: ComposeStack, workers: int) -> None:
    status, body = stack.management("PUT", f"/models/{MODEL}?min_worker={workers}&max_worker={workers}"
                                    "&synchronous=true")  # fmt: skip
    assert status == 200, body


def assert_confined(container: WorkerContainer, cluster: str) -> None:
    info = json.loads(docker("inspect", container.id))[0]
    assert info["Config"]["Labels"] == {
        "io.sluice.cluster": cluster,
        "io.sluice.model": MODEL,
        "io.sluice.version": "1.0",
        "io.sluice.worker": container.worker_id,
    }
    host = info["HostConfig"]
    assert (host["ReadonlyRootfs"], host["Privileged"], host["CapDrop"]) == (True, False, ["ALL"])
    assert info["Config"]["User"] == "sluice"
    assert [m["Destination"] for m in info["Mounts"]] == ["/var/cache/sluice"]


def test_a_registered_model_runs_in_labelled_containers_that_scale_and_go(stack: ComposeStack) -> None:
    status, body = stack.management("POST", f"/models?url={MODEL}.mar&initial_workers=1&synchronous=true")
    assert status == 200, body
    (worker,) = stack.wait_for_workers(MODEL, 1, timeout_s=30)
    assert_confined(worker, stack.cluster_id())

    with grpc.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        request = pb.PredictionsRequest(model_name=MODEL, input={"data": b"sleep:0:first"})
        reply = stub.Predictions(request, metadata=stack.metadata(), timeout=60)
    assert reply.prediction.decode() == f"sleep:0:first host={worker.id[:12]}"

    scale(stack, 3)
    three = stack.wait_for_workers(MODEL, 3, timeout_s=30)
    assert worker.id in {c.id for c in three}

    # Two of three stop while calls keep coming: each drains what it holds and exits 0.
    since = engine_time()
    with SteadyLoad(stack.grpc_target, MODEL, stack.metadata(), clients=3, sleep_s=0.2) as load:
        load.wait_for_calls(6)
        scale(stack, 1)
        load.wait_for_calls(6)
    calls = load.calls()
    assert [c for c in calls if not c.ok] == [], "every call during the scale-down is answered"
    (kept,) = stack.wait_for_workers(MODEL, 1, timeout_s=30)
    stopped = {c.worker_id for c in three} - {kept.worker_id}
    assert exit_codes(MODEL, since, engine_time()) == dict.fromkeys(stopped, 0)
    assert [c.id for c in stack.workers(MODEL, running_only=False)] == [kept.id], "stopped ones are removed"

    status, body = stack.management("DELETE", f"/models/{MODEL}")
    assert status == 200, body
    deadline = time.monotonic() + 30
    while stack.workers(MODEL, running_only=False) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert stack.workers(MODEL, running_only=False) == []
