"""TorchServe's ManagementAPIsService as TorchServe's own clients see it: stubs generated from the
management.proto and inference.proto in the torchserve 0.12.0 jar, a manager, a gateway and real
workers as processes (torchserve.md section 10 items 15-25). Imports no ``sluice.v1`` module."""

import json
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import grpc
import pytest

from tests.compat.torchserve_protos import compile_stubs, load
from tests.support.management_stack import Stack, start_stack
from tests.support.models import echo_model, sleeping_model, write_mar
from tests.support.redis_server import RedisServer

DESCRIBE_ORDER = [
    "modelName", "modelVersion", "modelUrl", "runtime", "minWorkers", "maxWorkers", "batchSize",
    "maxBatchDelay", "responseTimeout", "startupTimeout", "maxRetryTimeoutInSec", "clientTimeoutInMills",
    "parallelType", "parallelLevel", "deviceType", "continuousBatching", "useJobTicket", "useVenv",
    "stateful", "sequenceMaxIdleMSec", "sequenceTimeoutMSec", "maxNumSequence", "maxSequenceJobQueueSize",
    "loadedAtStartup", "workers", "jobQueueStatus",
]  # fmt: skip
SLUICE_ADDITIONS = ["autoscaling"]  # after TorchServe's keys, so its clients read them unchanged


class Clients:
    def __init__(self, served: Stack, management: ModuleType, inference: ModuleType, grpc_mgmt: ModuleType,
                 grpc_inf: ModuleType) -> None:  # fmt: skip
        self.served = served
        self.pb = management
        self.inference = inference
        self._mgmt_channel = grpc.insecure_channel(served.manager.grpc_target)
        self._inf_channel = grpc.insecure_channel(served.gateway_target)
        self.mgmt = grpc_mgmt.ManagementAPIsServiceStub(self._mgmt_channel)
        self.infer = grpc_inf.InferenceAPIsServiceStub(self._inf_channel)

    def close(self) -> None:
        self._mgmt_channel.close()
        self._inf_channel.close()

    def call(self, method: str, **fields: Any) -> str:
        request = getattr(self.pb, f"{method}Request")(**fields)
        rpc = getattr(self.mgmt, "ScaleWorker" if method == "ScaleWorker" else method)
        return str(rpc(request, timeout=180).msg)

    def error(self, method: str, **fields: Any) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as info:
            self.call(method, **fields)
        return info.value

    def predict(self, model: str, kind: bytes = b"bytes", data: bytes = b"x", version: str = "") -> bytes:
        request = self.inference.PredictionsRequest(
            model_name=model, model_version=version, input={"kind": kind, "data": data}
        )
        return bytes(self.infer.Predictions(request, timeout=60).prediction)


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    root = tmp_path_factory.mktemp("mgmt-grpc")
    gen = compile_stubs(root / "stubs")
    server = RedisServer(root / "redis")
    server.start()
    served = start_stack(root, server.url)
    for name in ("echo", "echo-async", "dup", "scaled", "paged-a", "paged-b", "paged-c", "paged-d"):
        write_mar(echo_model(name), served.store)
    write_mar(echo_model("versioned", "1.0"), served.store)
    write_mar(echo_model("versioned", "2.0"), root / "v2")
    (root / "v2" / "versioned.mar").rename(served.store / "versioned_2.mar")
    write_mar(sleeping_model("sleeper", sleep_s=1.0), served.store)
    result = Clients(
        served,
        load(gen, "management_pb2"),
        load(gen, "inference_pb2"),
        load(gen, "management_pb2_grpc"),
        load(gen, "inference_pb2_grpc"),
    )
    try:
        yield result
    finally:
        result.close()
        served.stop()
        server.kill()


def details(error: grpc.RpcError) -> str:
    return str(error.details())


def code(error: grpc.RpcError) -> grpc.StatusCode:
    return error.code()


def test_list_models_with_an_empty_request(clients: Clients) -> None:
    assert json.loads(clients.call("ListModels")) == {"nextPageToken": "0", "models": []}


def test_register_defaults_to_no_workers_and_async(clients: Clients) -> None:
    assert clients.call("RegisterModel", url="echo-async.mar") == (
        'Model "echo-async" Version: 1.0 registered with 0 initial workers. '
        "Use scale workers API to add workers for the model."
    )
    assert (
        clients.call("ScaleWorker", model_name="echo-async", min_worker=1) == "Processing worker updates..."
    )
    clients.call("UnregisterModel", model_name="echo-async")


def test_register_synchronously_then_predict_and_describe(clients: Clients) -> None:
    message = clients.call("RegisterModel", url="echo.mar", initial_workers=1, synchronous=True)
    assert message == 'Model "echo" Version: 1.0 registered with 1 initial workers'
    assert clients.predict("echo", data=b"hello") == b"hello"
    [entry] = json.loads(clients.call("DescribeModel", model_name="echo"))
    assert list(entry) == DESCRIBE_ORDER + SLUICE_ADDITIONS
    assert (entry["modelName"], entry["modelVersion"], entry["modelUrl"]) == ("echo", "1.0", "echo.mar")
    [worker] = entry["workers"]
    assert list(worker) == ["id", "startTime", "status", "memoryUsage", "pid", "gpu", "gpuUsage"]
    assert (worker["status"], worker["gpu"], worker["gpuUsage"]) == ("READY", False, "N/A")
    assert worker["memoryUsage"] > 0
    assert worker["pid"] > 0
    assert entry["jobQueueStatus"] == {"remainingCapacity": 100, "pendingRequests": 0}
    [custom] = json.loads(clients.call("DescribeModel", model_name="echo", customized=True))
    assert list(custom)[-1] == "customizedMetadata"
    assert custom["customizedMetadata"] == {"description": "echo", "model": "echo"}


def test_register_errors(clients: Clients) -> None:
    clients.call("RegisterModel", url="dup.mar")
    duplicate = clients.error("RegisterModel", url="dup.mar")
    assert code(duplicate) is grpc.StatusCode.ALREADY_EXISTS
    assert details(duplicate) == (
        "Model version 1.0 is already registered for model dup\n"
        "org.pytorch.serve.http.ConflictStatusException"
    )
    missing = clients.error("RegisterModel")
    assert (code(missing), details(missing).split("\n")[0]) == (
        grpc.StatusCode.INVALID_ARGUMENT, "Parameter url is required."
    )  # fmt: skip
    absent = clients.error("RegisterModel", url="doesnotexist.mar")
    assert (code(absent), details(absent).split("\n")[0]) == (
        grpc.StatusCode.NOT_FOUND, "Model not found at: doesnotexist.mar"
    )  # fmt: skip
    runtime = clients.error("RegisterModel", url="dup.mar", runtime="python4")
    assert (code(runtime), details(runtime).split("\n")[0]) == (
        grpc.StatusCode.INVALID_ARGUMENT, "Invalid RuntimeType value: python4"
    )  # fmt: skip
    clients.call("UnregisterModel", model_name="dup")


def test_scale_worker(clients: Clients) -> None:
    clients.call("RegisterModel", url="scaled.mar")
    assert clients.call("ScaleWorker", model_name="scaled", min_worker=2, synchronous=True) == (
        "Workers scaled to 2 for model: scaled"
    )
    [entry] = json.loads(clients.call("DescribeModel", model_name="scaled"))
    assert [w["status"] for w in entry["workers"]] == ["READY", "READY"]
    # min_worker <= 0 means 1 over gRPC: scaling "to 0" keeps one worker.
    assert clients.call("ScaleWorker", model_name="scaled", min_worker=0, synchronous=True) == (
        "Workers scaled to 1 for model: scaled"
    )
    assert clients.call(
        "ScaleWorker", model_name="scaled", model_version="1.0", min_worker=1, synchronous=True
    ) == ("Workers scaled to 1 for model: scaled, version: 1.0")
    # `timeout` (seconds; TorchServe ignores it) is honoured; 0 is proto3's unset, the default.
    for timeout in (0, 5):
        assert clients.call(
            "ScaleWorker", model_name="scaled", min_worker=1, timeout=timeout, synchronous=True
        ) == ("Workers scaled to 1 for model: scaled")
    gpus = clients.error("ScaleWorker", model_name="scaled", min_worker=1, number_gpu=1)
    assert (code(gpus), details(gpus).split(":")[0]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "number_gpu is not supported",
    )
    negative = clients.error("ScaleWorker", model_name="scaled", min_worker=1, timeout=-2)
    assert (code(negative), details(negative).split(".")[0]) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Invalid timeout: -2",
    )
    inverted = clients.error("ScaleWorker", model_name="scaled", min_worker=3, max_worker=1)
    assert (code(inverted), details(inverted)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "max_worker cannot be less than min_worker.\norg.pytorch.serve.http.BadRequestException",
    )
    unknown = clients.error("ScaleWorker", model_name="nope", min_worker=1)
    assert (code(unknown), details(unknown).split("\n")[0]) == (
        grpc.StatusCode.NOT_FOUND,
        "Model not found: nope",
    )
    clients.call("UnregisterModel", model_name="scaled")


def test_describe_and_unregister_errors(clients: Clients) -> None:
    for method in ("DescribeModel", "UnregisterModel"):
        error = clients.error(method, model_name="nope")
        assert (code(error), details(error)) == (
            grpc.StatusCode.NOT_FOUND,
            "Model not found: nope\norg.pytorch.serve.archive.model.ModelNotFoundException",
        )


def test_list_models_pages(clients: Clients) -> None:
    for name in ("paged-d", "paged-b", "paged-c", "paged-a"):
        clients.call("RegisterModel", url=f"{name}.mar")
    everything = json.loads(clients.call("ListModels", limit=100))["models"]
    names = [m["modelName"] for m in everything]
    assert names == sorted(names)
    start = names.index("paged-a")
    first = json.loads(clients.call("ListModels", limit=2, next_page_token=start))
    assert first["nextPageToken"] == str(start + 2)
    assert first["models"] == [
        {"modelName": "paged-a", "modelUrl": "paged-a.mar"},
        {"modelName": "paged-b", "modelUrl": "paged-b.mar"},
    ]
    assert json.loads(clients.call("ListModels", limit=2, next_page_token=len(names))) == {"models": []}
    for name in ("paged-a", "paged-b", "paged-c", "paged-d"):
        assert clients.call("UnregisterModel", model_name=name) == f'Model "{name}" unregistered'


def _version_of(clients: Clients) -> str:
    context = json.loads(clients.predict("versioned", kind=b"context"))
    return str(context["manifest"]["model"]["modelVersion"])


def test_set_default_switches_live_traffic_without_failures(clients: Clients) -> None:
    clients.call("RegisterModel", url="versioned.mar", initial_workers=1, synchronous=True)
    clients.call("RegisterModel", url="versioned_2.mar", initial_workers=1, synchronous=True)
    missing = clients.error("SetDefault", model_name="versioned", model_version="7.0")
    assert (code(missing), details(missing).split("\n")[0]) == (
        grpc.StatusCode.NOT_FOUND, "Model version 7.0 does not exist for model versioned"
    )  # fmt: skip
    assert _version_of(clients) == "1.0"
    seen: list[str] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                seen.append(_version_of(clients))
            except grpc.RpcError as exc:
                failures.append(exc)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        time.sleep(0.5)
        assert clients.call("SetDefault", model_name="versioned", model_version="2.0") == (
            'Default version successfully updated for model "versioned" to "2.0"'
        )
        deadline = time.monotonic() + 10
        while (not seen or seen[-1] != "2.0") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert failures == []
    assert seen[0] == "1.0"
    assert seen[-1] == "2.0"
    # Once switched, never back (the switch is one HSET, published to every gateway).
    assert "1.0" not in seen[seen.index("2.0") :]
    refused = clients.error("UnregisterModel", model_name="versioned", model_version="2.0")
    assert (code(refused), details(refused).split("\n")[0]) == (
        grpc.StatusCode.FAILED_PRECONDITION, "Cannot remove default version for model versioned"
    )  # fmt: skip
    assert clients.call("UnregisterModel", model_name="versioned", model_version="1.0") == (
        'Model "versioned" unregistered'
    )
    assert _version_of(clients) == "2.0"
    clients.call("UnregisterModel", model_name="versioned")


def test_unregister_answers_queued_requests(clients: Clients) -> None:
    clients.call("RegisterModel", url="sleeper.mar", initial_workers=1, synchronous=True)
    outcomes: list[object] = []

    def request() -> None:
        try:
            outcomes.append(clients.predict("sleeper", data=b"z"))
        except grpc.RpcError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=request) for _ in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    assert clients.call("UnregisterModel", model_name="sleeper") == 'Model "sleeper" unregistered'
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 6
    served = [o for o in outcomes if o == b"z"]
    refused = [o for o in outcomes if isinstance(o, grpc.RpcError)]
    assert len(served) >= 1, "the batch in hand finishes"
    assert len(served) + len(refused) == 6
    for error in refused:
        assert code(error) is grpc.StatusCode.NOT_FOUND
    error = clients.error("DescribeModel", model_name="sleeper")
    assert code(error) is grpc.StatusCode.NOT_FOUND


def test_scale_under_load_fails_no_request(clients: Clients) -> None:
    failures: list[BaseException] = []
    answered = [0]
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                assert clients.predict("echo", data=b"load") == b"load"
                answered[0] += 1
            except grpc.RpcError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=traffic) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        assert clients.call("ScaleWorker", model_name="echo", min_worker=2, synchronous=True) == (
            "Workers scaled to 2 for model: echo"
        )
        assert clients.call("ScaleWorker", model_name="echo", min_worker=1, synchronous=True) == (
            "Workers scaled to 1 for model: echo"
        )
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert answered[0] > 10
    [entry] = json.loads(clients.call("DescribeModel", model_name="echo"))
    assert len(entry["workers"]) == 1
