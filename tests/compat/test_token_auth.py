"""Token authorization and the model-API switch as TorchServe's own clients see them: stubs generated
from the protos in the torchserve 0.12.0 jar, a manager and a gateway started with their defaults
(token authorization on, model API off), the keys read from the key_file.json the manager wrote.
Every rpc of TorchServe's inference, OIP and management services is refused with PERMISSION_DENIED
"Token Authorization failed..." unless the call carries ``authorization: Bearer <key>`` of its scope;
with the management key, RegisterModel / UnregisterModel answer PERMISSION_DENIED "Model API
disabled". Imports no ``sluice.v1`` module."""

import time
from collections.abc import Iterator
from types import ModuleType

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sluice.auth.key_material import KeyKind, KeySet, read_key_file

from tests.compat.torchserve_protos import compile_stubs, load
from tests.support import management_stack, stack
from tests.support.redis_server import RedisServer
from tests.support.token_matrix import (
    AUTH_FAILED,
    REFUSED_CODES,
    Method,
    call_raw,
    granted,
    methods_of,
    refused_presentations,
)


class Stack:
    def __init__(
        self, target: str, manager_target: str, keyset: KeySet, stubs: dict[str, ModuleType]
    ) -> None:
        self.target = target
        self.manager_target = manager_target
        self.keyset = keyset
        self.inference = stubs["inference"]
        self.oip = stubs["oip"]
        self.management = stubs["management"]


def _wait_serving(target: str, gateway: stack.Service, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            assert gateway.alive(), gateway.log()
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)  # no token: exempt
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise AssertionError(gateway.log())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("tokens")
    gen = compile_stubs(root / "stubs")
    server = RedisServer(root / "redis")
    server.start()
    # The services' own defaults: token authorization on, model API off (the protocol stacks switch
    # tokens off; undo that).
    manager = management_stack.start_manager(
        server.url, root, disable_token_authorization="false", enable_model_api="false"
    )
    gateway, port = stack.start_gateway(server.url, root / "logs", disable_token_authorization="false")
    try:
        keyset = read_key_file(root / "key_file.json")
        assert keyset is not None
        _wait_serving(f"127.0.0.1:{port}", gateway)
        stubs = {
            "inference": load(gen, "inference_pb2_grpc"),
            "oip": load(gen, "open_inference_grpc_pb2"),
            "management": load(gen, "management_pb2_grpc"),
        }
        yield Stack(f"127.0.0.1:{port}", manager.grpc_target, keyset, stubs)
    finally:
        gateway.stop()
        manager.service.stop()
        server.kill()


def _methods(served: Stack) -> list[Method]:
    inference_pb2 = served.inference.inference__pb2  # the generated grpc module keeps its pb2 here
    return methods_of(
        [
            inference_pb2.DESCRIPTOR.services_by_name["InferenceAPIsService"],
            served.oip.DESCRIPTOR.services_by_name["GRPCInferenceService"],
        ]
    )


async def test_every_torchserve_rpc_refuses_calls_without_the_inference_key(served: Stack) -> None:
    methods = _methods(served)
    assert len(methods) >= 10
    failures = []
    async with grpc.aio.insecure_channel(served.target) as channel:
        for presentation in refused_presentations(served.keyset, KeyKind.INFERENCE):
            for method in methods:
                code, details = await call_raw(channel, method, presentation.metadata)
                if (code, details) != (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED):
                    failures.append((presentation.name, method, code, details))
    assert failures == []


async def test_every_torchserve_rpc_accepts_the_inference_key(served: Stack) -> None:
    right = granted(served.keyset, KeyKind.INFERENCE)
    async with grpc.aio.insecure_channel(served.target) as channel:
        for method in _methods(served):
            code, details = await call_raw(channel, method, right.metadata, timeout_s=3)
            assert code not in REFUSED_CODES, (method, code, details)


def test_torchserve_client_ping_with_and_without_the_key(served: Stack) -> None:
    empty = served.inference.google_dot_protobuf_dot_empty__pb2.Empty()
    with grpc.insecure_channel(served.target) as channel:
        stub = served.inference.InferenceAPIsServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Ping(empty, timeout=5)
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert info.value.details() == AUTH_FAILED
        metadata = (("authorization", f"Bearer {served.keyset.inference.value}"),)
        reply = stub.Ping(empty, metadata=metadata, timeout=5)
        assert '"status": "Healthy"' in reply.health


def _management_methods(served: Stack) -> list[Method]:
    return methods_of(
        [served.management.management__pb2.DESCRIPTOR.services_by_name["ManagementAPIsService"]]
    )


async def test_every_management_rpc_refuses_calls_without_the_management_key(served: Stack) -> None:
    failures = []
    async with grpc.aio.insecure_channel(served.manager_target) as channel:
        for presentation in refused_presentations(served.keyset, KeyKind.MANAGEMENT):
            for method in _management_methods(served):
                code, details = await call_raw(channel, method, presentation.metadata)
                if (code, details) != (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED):
                    failures.append((presentation.name, method, code, details))
    assert failures == []


def test_torchserve_management_client_with_the_key_and_the_model_api_off(served: Stack) -> None:
    pb = served.management.management__pb2
    metadata = (("authorization", f"Bearer {served.keyset.management.value}"),)
    with grpc.insecure_channel(served.manager_target) as channel:
        stub = served.management.ManagementAPIsServiceStub(channel)
        listing = stub.ListModels(pb.ListModelsRequest(limit=10), metadata=metadata, timeout=10)
        assert '"models": []' in listing.msg
        for call, request in (
            (stub.RegisterModel, pb.RegisterModelRequest(url="echo.mar")),
            (stub.UnregisterModel, pb.UnregisterModelRequest(model_name="echo")),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call(request, metadata=metadata, timeout=10)
            assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert (
                info.value.details() == "Model API disabled\norg.pytorch.serve.archive.model.ModelException"
            )
        with pytest.raises(grpc.RpcError) as info:
            stub.ListModels(
                pb.ListModelsRequest(),
                metadata=(("authorization", f"Bearer {served.keyset.inference.value}"),),
                timeout=10,
            )
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
