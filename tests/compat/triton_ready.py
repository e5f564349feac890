"""Waiting for a gateway as tritonclient sees it (compat tier: tritonclient's modules, never Sluice's
generated ones)."""

import time

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support import stack


def wait_ready(address: str, gateway: stack.Service, timeout_s: float = 30.0) -> None:
    """Return once the gateway at ``address`` answers ServerReady true; fail with its log if it exits
    or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    client = grpcclient.InferenceServerClient(address)
    try:
        while time.monotonic() < deadline:
            assert gateway.alive(), gateway.log()
            try:
                if client.is_server_ready():
                    return
            except InferenceServerException:
                pass
            time.sleep(0.1)
    finally:
        client.close()
    raise AssertionError(f"gateway not ready:\n{gateway.log()}")
