"""No stack trace, exception text or internal path in any error body or gRPC details, even when a
component fails unexpectedly with all of those in its exception."""

import re

import aiohttp
import grpc
import pytest
from sluice.auth.key_material import KeyKind, KeySet
from sluice_gateway import health
from sluice_gateway.kserve import service as kserve_service

from tests.support.token_matrix import Method, call_raw, granted

SECRET = 'Traceback (most recent call last):\n  File "/srv/sluice/secret_module.py", line 7, in <module>'
LEAKS = re.compile(r"Traceback|File \"|/srv/|/work/|site-packages|\.py\b|RuntimeError|sluice_gateway")
TS = "/org.pytorch.serve.grpc.inference.InferenceAPIsService"
KS = "/inference.GRPCInferenceService"


def assert_clean(text: str) -> None:
    assert not LEAKS.search(text), text


@pytest.fixture
def broken_internals(monkeypatch: pytest.MonkeyPatch) -> None:
    async def explode(*args: object, **kwargs: object) -> bool:
        raise RuntimeError(SECRET)

    monkeypatch.setattr(health.ModelHealth, "healthy", explode)
    monkeypatch.setattr(kserve_service.KServeService, "ready", explode)
    return


async def test_grpc_details_stay_clean(
    broken_internals: None, grpc_channel: grpc.aio.Channel, keyset: KeySet
) -> None:
    right = granted(keyset, KeyKind.INFERENCE).metadata
    cases = [
        (Method(f"{TS}/Ping"), b""),
        (Method(f"{TS}/Predictions"), b"\xff\xff\xff garbage"),
        (Method(f"{TS}/Predictions"), b"\n\x04nope"),
        (Method(f"{TS}/StreamPredictions", server_streaming=True), b"\xff\xff"),
        (Method(f"{KS}/ServerReady"), b""),
        (Method(f"{KS}/ModelInfer"), b"\xff\xff\xff"),
        (Method(f"{KS}/ModelStreamInfer", True, True), b"\xff\xff"),
    ]
    codes = set()
    for method, request in cases:
        code, details = await call_raw(grpc_channel, method, right, request=request)
        codes.add(code)
        assert_clean(details)
    assert grpc.StatusCode.INTERNAL in codes  # the injected failures were hit


async def test_rest_bodies_stay_clean(
    broken_internals: None, rest: aiohttp.ClientSession, keyset: KeySet
) -> None:
    headers = {"Authorization": f"Bearer {keyset.inference.value}"}
    cases = [
        ("GET", "/ping", b""),
        ("GET", "/v2/health/ready", b""),
        ("POST", "/predictions/nope", b"x"),
        ("POST", "/v2/models/nope/infer", b"{not json"),
        ("POST", "/v2/models/nope/infer", b'{"inputs": [{"name": 1}]}'),
        ("GET", "/no/such/route", b""),
        ("OPTIONS", "/predictions/nope", b""),
    ]
    statuses = set()
    for method, path, body in cases:
        async with rest.request(method, path, headers=headers, data=body) as response:
            statuses.add(response.status)
            assert_clean(await response.text())
    assert 500 in statuses
