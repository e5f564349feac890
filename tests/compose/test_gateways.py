"""Several gateways behind the stack's one published port: the load balancer finds every replica
through Docker's DNS, calls reach each of them, and each one's metrics are reachable."""

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.compose_stack import ComposeStack, requests_by_gateway, wait_for_gateways

pytestmark = [pytest.mark.compose, pytest.mark.timeout(600)]

SLOTS = range(1, 9)
CALLS = 40


def test_calls_through_the_published_port_reach_both_gateways(stack: ComposeStack) -> None:
    stack.scale_gateways(2)
    wait_for_gateways(stack, 2)
    before = requests_by_gateway(SLOTS, stack, "demo")
    request = pb.PredictionsRequest(model_name="demo", input={"data": b"[5.1, 3.5, 1.4, 0.2]"})
    with grpc.insecure_channel(stack.grpc_target) as channel:  # one client connection
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        replies = [stub.Predictions(request, metadata=stack.metadata(), timeout=60) for _ in range(CALLS)]
    assert all(b'"label"' in reply.prediction for reply in replies)
    after = requests_by_gateway(SLOTS, stack, "demo")
    served = {host: count - before.get(host, 0.0) for host, count in after.items()}
    assert len(served) == 2, f"two gateways report metrics: {served}"
    assert sum(served.values()) == CALLS
    assert all(count > 0 for count in served.values()), f"each gateway served calls: {served}"


def test_an_empty_metrics_slot_answers_404(stack: ComposeStack) -> None:
    status, text = stack.metrics(8)
    assert (status, text) == (404, "no gateway in slot 8")
