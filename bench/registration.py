"""Register-to-READY through TorchServe's gRPC management API, timed the same way on both servers."""

import time
from typing import TypeAlias

import grpc
from sluice.v1 import torchserve_management_pb2 as mgmt

from bench.servers.common import Server, predict_ok, wait_until

REGISTER_MODEL = "mlp_b1_w1"
MANAGEMENT_SERVICE = "/org.pytorch.serve.grpc.management.ManagementAPIsService"
# No (de)serializers: serialized requests out, raw bytes back.
Call: TypeAlias = "grpc.UnaryUnaryMultiCallable[bytes, bytes]"


def time_grpc_register(server: Server, model: str, probe: bytes) -> float | None:
    """Unregister ``model``, wait until it no longer predicts, then time RegisterModel(synchronous,
    1 worker) until ``probe`` predicts again; None when UnregisterModel is refused (a server without
    the gRPC management API)."""
    target = f"127.0.0.1:{server.ports.grpc_management}"
    with grpc.insecure_channel(target) as channel:
        unregister: Call = channel.unary_unary(f"{MANAGEMENT_SERVICE}/UnregisterModel")
        register: Call = channel.unary_unary(f"{MANAGEMENT_SERVICE}/RegisterModel")
        try:
            unregister(mgmt.UnregisterModelRequest(model_name=model).SerializeToString(), timeout=120)
        except grpc.RpcError:
            return None
        wait_until(
            lambda: not predict_ok(server.ports.grpc_target, probe, 1.0), timeout_s=60, interval_s=0.05
        )
        request = mgmt.RegisterModelRequest(url=f"{model}.mar", initial_workers=1, synchronous=True)
        started = time.perf_counter()
        register(request.SerializeToString(), timeout=300)
        wait_until(lambda: predict_ok(server.ports.grpc_target, probe, 1.0), timeout_s=300, interval_s=0.01)
        return time.perf_counter() - started
