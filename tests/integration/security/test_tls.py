"""TLS as TorchServe configures it, on real listeners with a certificate made in the test: a gateway
serving gRPC (enable_grpc_ssl) and REST (https:// inference_address) over TLS answers a client that
trusts the certificate and refuses a plain-text one; the manager's gRPC port does the same; an
https:// address without a certificate, or a certificate that cannot be served, stops the service
with a message naming the files."""

import re
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from sluice.transport.http_listener import HttpListener, parse_address
from sluice.transport.tls import TlsError, TlsFiles, TlsSettings
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1 import torchserve_management_pb2 as mpb
from sluice.v1 import torchserve_management_pb2_grpc as mpb_grpc
from sluice_manager.api.grpc_api.server import ManagementGrpcServer

from tests.support.certificates import make_certificate
from tests.support.models import echo_model
from tests.support.redis_server import RedisServer, free_port
from tests.support.stack import Service, register, start_gateway, start_worker


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    folder = tmp_path_factory.mktemp("tls")
    return TlsFiles(*make_certificate(folder))


def trusting(certificate: TlsFiles) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate.certificate))


@pytest.fixture
def tls_gateway(
    redis_server: RedisServer, tmp_path: Path, certificate: TlsFiles
) -> Iterator[tuple[int, int]]:
    """A gateway serving gRPC and REST over TLS, an echo model with a worker: (gRPC port, REST port)."""
    register(redis_server.url, echo_model(), tmp_path)
    rest_port = free_port()
    worker = start_worker(redis_server.url, "echo", "1.0", tmp_path / "logs")
    gateway, grpc_port = start_gateway(
        redis_server.url,
        tmp_path / "logs",
        certificate_file=str(certificate.certificate),
        private_key_file=str(certificate.private_key),
        enable_grpc_ssl="true",
        inference_address=f"https://127.0.0.1:{rest_port}",
    )
    try:
        credentials = grpc.ssl_channel_credentials(certificate.certificate.read_bytes())
        deadline = time.monotonic() + 60
        while not _answers(grpc_port, credentials):
            assert gateway.alive(), gateway.log()
            assert time.monotonic() < deadline, gateway.log()
            time.sleep(0.2)
        yield grpc_port, rest_port
    finally:
        gateway.stop()
        worker.stop()


def _answers(port: int, credentials: grpc.ChannelCredentials) -> bool:
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        try:
            stub.Predictions(pb.PredictionsRequest(model_name="echo", input={"data": b"hi"}), timeout=5)
        except grpc.RpcError:
            return False
    return True


def test_the_gateway_serves_grpc_and_rest_over_tls_and_refuses_plain_text(
    tls_gateway: tuple[int, int], certificate: TlsFiles
) -> None:
    grpc_port, rest_port = tls_gateway
    credentials = grpc.ssl_channel_credentials(certificate.certificate.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
        answer = pb_grpc.InferenceAPIsServiceStub(channel).Predictions(
            pb.PredictionsRequest(model_name="echo", input={"data": b"over tls"}), timeout=30
        )
    assert answer.prediction
    plain = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    with plain, pytest.raises(grpc.RpcError) as refused:
        pb_grpc.InferenceAPIsServiceStub(plain).Predictions(
            pb.PredictionsRequest(model_name="echo"), timeout=5
        )
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    with urllib.request.urlopen(
        f"https://127.0.0.1:{rest_port}/ping", context=trusting(certificate), timeout=10
    ) as response:
        assert response.status == 200
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{rest_port}/ping", timeout=10)


async def test_the_management_grpc_port_serves_tls(certificate: TlsFiles) -> None:
    settings = TlsSettings(
        certificate_file=certificate.certificate,
        private_key_file=certificate.private_key,
        enable_grpc_ssl=True,
    )

    class Listing:
        config = SimpleNamespace(model_api_enabled=True)

        async def list_models(self, limit: int, token: int) -> dict[str, Any]:
            return {"models": []}

    server = ManagementGrpcServer(Listing(), host="127.0.0.1", port=0, max_request_size=1 << 20, tls=settings)  # type: ignore[arg-type]
    port = await server.start()
    try:
        credentials = grpc.ssl_channel_credentials(certificate.certificate.read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
            listed = await mpb_grpc.ManagementAPIsServiceStub(channel).ListModels(
                mpb.ListModelsRequest(), timeout=10
            )
        assert '"models": []' in listed.msg
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await mpb_grpc.ManagementAPIsServiceStub(channel).ListModels(
                    mpb.ListModelsRequest(), timeout=5
                )
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


def test_an_https_address_without_a_certificate_is_refused_by_name() -> None:
    from aiohttp import web

    with pytest.raises(
        ValueError, match=re.escape("inference address https://127.0.0.1:1 is https: set certificate_file")
    ):
        HttpListener(
            web.Application(),
            parse_address("https://127.0.0.1:1"),
            name="inference",
            cancel_on_disconnect=True,
        )


def test_a_certificate_that_cannot_be_served_is_named(tmp_path: Path, certificate: TlsFiles) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(TlsError, match=re.escape(f"certificate_file {bogus}")):
        TlsFiles(bogus, certificate.private_key).server_context()
    with pytest.raises(TlsError, match=re.escape("missing.pem")):
        TlsFiles(certificate.certificate, tmp_path / "missing.pem").grpc_credentials()


def test_a_gateway_with_an_https_address_and_no_certificate_does_not_start(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    gateway: Service
    gateway, _port = start_gateway(
        redis_server.url, tmp_path / "logs", inference_address=f"https://127.0.0.1:{free_port()}"
    )
    try:
        assert gateway.process.wait(timeout=60) != 0
        assert "set certificate_file and private_key_file" in gateway.log()
    finally:
        gateway.stop()
