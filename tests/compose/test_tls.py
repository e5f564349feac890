"""The compose stack with TLS on its published ports (docker-compose.tls.yml) and a certificate made
in the test: the load balancer serves gRPC and REST over TLS in front of plain gateways, the manager
serves its gRPC and REST ports over TLS; plain-text clients are refused."""

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1 import torchserve_management_pb2 as mpb
from sluice.v1 import torchserve_management_pb2_grpc as mpb_grpc

from tests.support.certificates import make_certificate
from tests.support.compose_stack import ComposeStack, running, unavailable_reason

pytestmark = [pytest.mark.compose_slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def tls_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("compose-tls")
    tls = root / "tls"
    tls.mkdir()
    certificate, key = make_certificate(tls)
    # The manager reads the key as its own user (uid 10001).
    key.chmod(0o644)
    tls.chmod(0o755)
    built = ComposeStack.create(root, files=("docker-compose.tls.yml",), ca=certificate, TLS_DIR=str(tls))
    with running(built):
        yield built


def test_the_published_ports_serve_tls_and_refuse_plain_text(tls_stack: ComposeStack) -> None:
    stack = tls_stack
    assert stack.ca is not None
    request = pb.PredictionsRequest(model_name="demo", input={"data": b"[5.1, 3.5, 1.4, 0.2]"})
    with stack.channel() as channel:
        answer = pb_grpc.InferenceAPIsServiceStub(channel).Predictions(
            request, metadata=stack.metadata(), timeout=60
        )
    assert b"label" in answer.prediction
    plain = grpc.insecure_channel(stack.grpc_target)
    with plain, pytest.raises(grpc.RpcError):
        pb_grpc.InferenceAPIsServiceStub(plain).Predictions(request, metadata=stack.metadata(), timeout=10)
    context = ssl.create_default_context(cafile=str(stack.ca))
    ping = urllib.request.Request(
        f"https://127.0.0.1:{stack.rest_port}/ping",
        headers={"Authorization": f"Bearer {stack.key('inference')}"},
    )
    with urllib.request.urlopen(ping, context=context, timeout=30) as response:
        assert response.status == 200
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{stack.rest_port}/ping", timeout=10)
    status, listed = stack.management("GET", "/models")
    assert status == 200
    assert "demo" in {model["modelName"] for model in listed["models"]}
    credentials = grpc.ssl_channel_credentials(stack.ca.read_bytes())
    metadata = (("authorization", f"Bearer {stack.key('management')}"),)
    with grpc.secure_channel(f"127.0.0.1:{stack.management_port}", credentials) as channel:
        described = mpb_grpc.ManagementAPIsServiceStub(channel).DescribeModel(
            mpb.DescribeModelRequest(model_name="demo"), metadata=metadata, timeout=30
        )
    assert '"modelName": "demo"' in described.msg
