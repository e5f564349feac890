"""`sluice start` with TLS in config.properties (TorchServe's keys): it waits for a TLS gateway, and
the inference and management ports answer over TLS only."""

import ssl
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

from tests.support.certificates import make_certificate
from tests.support.cli_stack import Stack
from tests.support.models import echo_model, write_mar


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("tls-start")
    certificate, key = make_certificate(root)
    built = Stack.create(
        root, f"certificate_file={certificate}\nprivate_key_file={key}\nenable_grpc_ssl=true\n"
    )
    config = built.root / "config.properties"
    # The REST ports over TLS: the same ports, https:// (the later key wins).
    config.write_text(
        config.read_text()
        + f"inference_address=https://127.0.0.1:{built.http_port}\n"
        + f"management_address=https://127.0.0.1:{built.management_http_port}\n"
    )
    write_mar(echo_model(), built.store)
    built.start()
    try:
        yield built
    finally:
        built.stop()


def test_start_waits_for_a_tls_gateway_which_serves_tls_only(stack: Stack) -> None:
    certificate = (stack.root / "cert.pem").read_bytes()
    credentials = grpc.ssl_channel_credentials(certificate)
    with grpc.secure_channel(stack.grpc_target, credentials) as channel:
        answer = pb_grpc.InferenceAPIsServiceStub(channel).Predictions(
            pb.PredictionsRequest(model_name="echo", input={"data": b"tls"}), timeout=30
        )
    assert answer.prediction
    plain = grpc.insecure_channel(stack.grpc_target)
    with plain, pytest.raises(grpc.RpcError):
        pb_grpc.InferenceAPIsServiceStub(plain).Predictions(
            pb.PredictionsRequest(model_name="echo"), timeout=5
        )
    context = ssl.create_default_context(cafile=str(stack.root / "cert.pem"))
    for port, path in ((stack.http_port, "/ping"), (stack.management_http_port, "/models")):
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}{path}", context=context, timeout=10
        ) as response:
            assert response.status == 200
