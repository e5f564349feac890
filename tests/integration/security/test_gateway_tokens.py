"""The token matrix on the gateway: every gRPC method (TorchServe inference, KServe v2 under both
names, unknown methods) and every REST route of the inference port, against every way of presenting a
wrong token; the inference key gets through; the exempt routes need nothing."""

import re

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sluice.auth.key_material import KeyKind, KeySet
from sluice.v1 import kserve_pb2, torchserve_inference_pb2
from sluice_gateway.app import Gateway
from sluice_gateway.kserve.grpc import TORCHSERVE_SERVICE_NAME

from tests.integration.security.conftest import install_keys
from tests.support.token_matrix import (
    AUTH_FAILED,
    REFUSED_CODES,
    Method,
    Presentation,
    call_raw,
    granted,
    methods_of,
    refused_presentations,
)

KSERVE = kserve_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
METHODS = [
    *methods_of(
        [torchserve_inference_pb2.DESCRIPTOR.services_by_name["InferenceAPIsService"], KSERVE],
        {KSERVE.full_name: TORCHSERVE_SERVICE_NAME},
    ),
    Method("/no.such.Service/Nothing"),
    Method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", True, True),
]
PARAMS = {"model": "echo", "version": "1.0", "url_path": "extra/path"}


def concrete(canonical: str) -> str:
    return re.sub(r"\{(\w+)[^}]*\}", lambda m: PARAMS.get(m.group(1), "x"), canonical)


def rest_routes(gateway: Gateway) -> list[tuple[str, str]]:
    """(method, concrete path) of every route of the inference port."""
    found = []
    for route in gateway.listeners[0].app.router.routes():
        method = "POST" if route.method == "*" else route.method
        if method == "HEAD":
            continue
        found.append((method, concrete(route.resource.canonical)))  # type: ignore[union-attr]
    return sorted(set(found))


def headers_of(presentation: Presentation) -> list[tuple[str, str]]:
    return [(key.title(), value) for key, value in presentation.metadata]


async def test_every_grpc_method_refuses_every_wrong_presentation(
    grpc_channel: grpc.aio.Channel, keyset: KeySet
) -> None:
    failures = []
    for presentation in refused_presentations(keyset, KeyKind.INFERENCE):
        for method in METHODS:
            code, details = await call_raw(grpc_channel, method, presentation.metadata)
            if (code, details) != (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED):
                failures.append((presentation.name, method.path, code, details))
    assert failures == []


async def test_every_grpc_method_accepts_the_inference_key(
    grpc_channel: grpc.aio.Channel, keyset: KeySet
) -> None:
    right = granted(keyset, KeyKind.INFERENCE)
    for method in METHODS[:-2]:
        code, details = await call_raw(grpc_channel, method, right.metadata, timeout_s=2.0)
        assert code not in REFUSED_CODES, (method.path, code, details)
    ping = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
    assert (await call_raw(grpc_channel, ping, right.metadata))[0] is grpc.StatusCode.OK


async def test_expired_keys_are_refused_on_grpc(
    grpc_channel: grpc.aio.Channel, redis_client: "aioredis.Redis"
) -> None:
    expired = await install_keys(redis_client, expiration_min=1, age_min=2)
    ping = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
    code, details = await call_raw(grpc_channel, ping, granted(expired, KeyKind.INFERENCE).metadata)
    assert (code, details) == (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED)


async def test_health_needs_no_token(grpc_channel: grpc.aio.Channel) -> None:
    reply = await health_pb2_grpc.HealthStub(grpc_channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_every_rest_route_refuses_every_wrong_presentation(
    secure_gateway: Gateway, rest: aiohttp.ClientSession, keyset: KeySet
) -> None:
    routes = [r for r in rest_routes(secure_gateway) if r[1] != "/api-description" and r != ("OPTIONS", "/")]
    assert len(routes) >= 15
    failures = []
    for presentation in refused_presentations(keyset, KeyKind.INFERENCE):
        for method, path in [*routes, ("GET", "/no/such/route"), ("DELETE", "/ping")]:
            async with rest.request(method, path, headers=headers_of(presentation), data=b"{}") as response:
                body = await response.json(content_type=None)
                if response.status != 400 or not _auth_body(path, body):
                    failures.append((presentation.name, method, path, response.status, body))
    assert failures == []


def _auth_body(path: str, body: dict[str, object]) -> bool:
    if path.startswith("/v2"):
        return body == {"error": AUTH_FAILED}
    return body == {"code": 400, "type": "InvalidKeyException", "message": AUTH_FAILED}


async def test_every_rest_route_accepts_the_inference_key(
    secure_gateway: Gateway, rest: aiohttp.ClientSession, keyset: KeySet
) -> None:
    headers = headers_of(granted(keyset, KeyKind.INFERENCE))
    for method, path in rest_routes(secure_gateway):
        async with rest.request(method, path, headers=headers, data=b"{}") as response:
            body = await response.read()
            assert b"Token Authorization failed" not in body, (method, path, response.status)
    async with rest.get("/ping", headers=headers) as response:
        assert response.status == 200


async def test_expired_key_is_refused_on_rest(
    rest: aiohttp.ClientSession, redis_client: "aioredis.Redis"
) -> None:
    expired = await install_keys(redis_client, expiration_min=1, age_min=2)
    headers = headers_of(granted(expired, KeyKind.INFERENCE))
    async with rest.get("/ping", headers=headers) as response:
        assert response.status == 400
        assert (await response.json())["type"] == "InvalidKeyException"


@pytest.mark.parametrize(("method", "path"), [("OPTIONS", "/"), ("GET", "/api-description")])
async def test_api_description_needs_no_token(rest: aiohttp.ClientSession, method: str, path: str) -> None:
    async with rest.request(method, path) as response:
        assert response.status == 200
        assert "openapi" in await response.json()


async def test_metrics_need_no_token(secure_gateway: Gateway) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{secure_gateway.metrics_port}/metrics") as response,
    ):
        assert response.status == 200


async def test_keys_appearing_later_are_picked_up(
    grpc_channel: grpc.aio.Channel, redis_client: "aioredis.Redis"
) -> None:
    """A gateway started before the manager created keys refuses everything, then serves once they
    exist (it never creates keys itself)."""
    await redis_client.delete("sluice:auth:keys")
    ping = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
    code, _ = await call_raw(grpc_channel, ping, (("authorization", "Bearer anything"),))
    assert code is grpc.StatusCode.PERMISSION_DENIED
    fresh = await install_keys(redis_client)
    assert (await call_raw(grpc_channel, ping, granted(fresh, KeyKind.INFERENCE).metadata))[
        0
    ] is grpc.StatusCode.OK
