"""The token matrix and the model-API switch on a real manager process started with its defaults
(token authorization on, model API off): every ManagementAPIsService rpc and every REST route of the
management port, ``/token`` (API key; GET or POST) and its effect on the manager and on a gateway."""

import json
import re
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sluice.auth.key_material import Key, KeyKind, KeySet, read_key_file
from sluice.auth.store import TokenStore
from sluice.redis.client import connect
from sluice.v1 import torchserve_management_pb2
from sluice_manager.api.rest_api.routes import ManagementRoutes
from sluice_manager.api.rest_api.workflow_routes import WorkflowRoutes
from sluice_manager.api.token_api import TokenRoutes

from tests.support import management_stack, stack
from tests.support.eventually import eventually
from tests.support.management_stack import HttpAnswer, http
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

SERVICE = torchserve_management_pb2.DESCRIPTOR.services_by_name["ManagementAPIsService"]
METHODS = [*methods_of([SERVICE]), Method("/no.such.Service/Nothing")]
MGMT = f"/{SERVICE.full_name}"
PARAMS = {"model": "echo", "version": "1.0"}


@dataclass
class Site:
    manager: management_stack.Manager
    key_file: Path

    def keys(self) -> KeySet:
        keyset = read_key_file(self.key_file)
        assert keyset is not None
        return keyset

    def rest(self, method: str, path: str, token: str | None = None) -> HttpAnswer:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return http(method, self.manager.rest_url + path, b"", headers)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.kill()


@pytest.fixture(scope="module")
def site(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("manager")
    (root / "store").mkdir()
    manager = management_stack.start_manager(
        redis_url, root, disable_token_authorization="false", enable_model_api="false"
    )
    try:
        yield Site(manager, root / "key_file.json")
    finally:
        manager.service.stop()


def routes() -> list[tuple[str, str]]:
    found = set()
    for route in [
        *ManagementRoutes(None).routes(),  # type: ignore[arg-type]
        *WorkflowRoutes(None).routes(),  # type: ignore[arg-type]
        *TokenRoutes(None).routes(),  # type: ignore[arg-type]
    ]:
        method = "POST" if route.method == "*" else route.method
        found.add((method, re.sub(r"\{(\w+)[^}]*\}", lambda m: PARAMS.get(m.group(1), "x"), route.path)))
    return sorted(found)


def public(method: str, path: str) -> bool:
    return path == "/api-description" or (method, path) == ("OPTIONS", "/")


def test_the_manager_writes_a_private_key_file(site: Site) -> None:
    assert stat.S_IMODE(site.key_file.stat().st_mode) == 0o600
    assert set(json.loads(site.key_file.read_text())) == {"management", "inference", "API"}


async def test_every_rpc_refuses_every_wrong_presentation(site: Site) -> None:
    failures = []
    async with grpc.aio.insecure_channel(site.manager.grpc_target) as channel:
        for presentation in refused_presentations(site.keys(), KeyKind.MANAGEMENT):
            for method in METHODS:
                code, details = await call_raw(channel, method, presentation.metadata)
                if (code, details) != (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED):
                    failures.append((presentation.name, method.path, code, details))
    assert failures == []


async def test_every_rpc_accepts_the_management_key_and_the_model_api_stays_off(site: Site) -> None:
    right = granted(site.keys(), KeyKind.MANAGEMENT).metadata
    async with grpc.aio.insecure_channel(site.manager.grpc_target) as channel:
        for method in METHODS[:-1]:
            code, details = await call_raw(channel, method, right, timeout_s=10)
            if method.path.endswith(("/RegisterModel", "/UnregisterModel")):
                expected = "Model API disabled\norg.pytorch.serve.archive.model.ModelException"
                assert (code, details) == (grpc.StatusCode.PERMISSION_DENIED, expected)
            else:
                assert code not in REFUSED_CODES, (method.path, code, details)
        listing = await call_raw(channel, Method(f"{MGMT}/ListModels"), right)
        assert listing[0] is grpc.StatusCode.OK


def test_every_rest_route_refuses_every_wrong_presentation(site: Site) -> None:
    keyset = site.keys()
    checked = [r for r in routes() if not public(*r)] + [("GET", "/no/such/route"), ("PATCH", "/models")]
    assert len(checked) >= 20
    failures = []
    for presentation in refused_presentations(keyset, KeyKind.MANAGEMENT):
        if presentation.name == "two headers":
            continue  # urllib sends one of each (the gateway's aiohttp test sends two)
        headers = {k.title(): v for k, v in presentation.metadata}
        for method, path in checked:
            if path == "/token":
                continue  # the API key's route: see test_token_route
            answer = http(method, site.manager.rest_url + path, b"", headers)
            expected = {"code": 400, "type": "InvalidKeyException", "message": AUTH_FAILED}
            if answer.status != 400 or answer.json() != expected:
                failures.append((presentation.name, method, path, answer.status, answer.body[:200]))
    assert failures == []


def test_every_rest_route_accepts_the_management_key_and_the_model_api_stays_off(site: Site) -> None:
    key = site.keys().management.value
    for method, path in routes():
        if path == "/token":
            continue
        answer = site.rest(method, path, key)
        assert b"Token Authorization failed" not in answer.body, (method, path, answer.status)
    switched_off = [
        ("POST", "/models?url=echo.mar"),
        ("DELETE", "/models/echo"),
        ("DELETE", "/models/e/1"),
        ("POST", "/workflows?url=w.war"),
        ("DELETE", "/workflows/w"),
    ]
    for method, path in switched_off:
        answer = site.rest(method, path, key)
        assert answer.status == 405, (method, path, answer.body)
        assert answer.json()["type"] == "MethodNotAllowedException"
    assert site.rest("GET", "/models", key).json() == {"models": []}


def test_public_routes_need_no_token(site: Site) -> None:
    assert site.rest("OPTIONS", "/").status == 200
    assert site.rest("GET", "/api-description").status == 200


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_token_route_needs_the_api_key(site: Site, method: str) -> None:
    keyset = site.keys()
    for token in (None, keyset.management.value, keyset.inference.value, "nope"):
        answer = site.rest(method, "/token?type=inference", token)
        assert (answer.status, answer.json()["type"]) == (400, "InvalidKeyException")
    assert site.rest(method, "/token?type=API", keyset.api.value).status == 400
    assert site.keys() == keyset


def test_head_does_not_renew_a_key(site: Site) -> None:
    keyset = site.keys()
    # No HEAD route: refused like any unknown route for the API key, 405 for the management key.
    assert site.rest("HEAD", "/token?type=inference", keyset.api.value).status == 400
    assert site.rest("HEAD", "/token?type=inference", keyset.management.value).status == 405
    assert site.keys() == keyset


# GET is the form TorchServe's API docs show (curl localhost:8081/token?type=management -H ...).
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_renewing_the_management_key_invalidates_the_old_one(site: Site, method: str) -> None:
    before = site.keys()
    answer = site.rest(method, "/token?type=management", before.api.value)
    assert answer.status == 200
    new_key = answer.json()["management"]["key"]
    after = site.keys()
    assert after.management.value == new_key
    assert (after.inference, after.api) == (before.inference, before.api)
    assert site.rest("GET", "/models", before.management.value).status == 400
    assert site.rest("GET", "/models", new_key).status == 200


async def test_renewing_the_inference_key_reaches_the_gateway(
    site: Site, redis_url: str, tmp_path: Path
) -> None:
    gateway, port = stack.start_gateway(redis_url, tmp_path, disable_token_authorization="false")
    ping = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:

            async def answers(metadata: tuple[tuple[str, str], ...], code: grpc.StatusCode) -> bool:
                return (await call_raw(channel, ping, metadata, timeout_s=2))[0] is code

            old = granted(site.keys(), KeyKind.INFERENCE).metadata
            await eventually(lambda: answers(old, grpc.StatusCode.OK), timeout_s=30)
            assert await answers((), grpc.StatusCode.PERMISSION_DENIED)
            renewed = site.rest("POST", "/token?type=inference", site.keys().api.value)
            new = (("authorization", f"Bearer {renewed.json()['inference']['key']}"),)
            started = time.monotonic()
            await eventually(lambda: answers(old, grpc.StatusCode.PERMISSION_DENIED), timeout_s=10)
            assert time.monotonic() - started < 5  # the gateway's key cache is 1 s
            assert await answers(new, grpc.StatusCode.OK)
    finally:
        gateway.stop()


async def test_an_expired_management_key_is_refused_on_both_transports(site: Site, redis_url: str) -> None:
    expired = Key(secrets.token_urlsafe(32), int(time.time() * 1000) - 1)
    client = connect(redis_url)
    try:
        await TokenStore(client).put(KeyKind.MANAGEMENT, expired)
    finally:
        await client.aclose()
    metadata = (("authorization", f"Bearer {expired.value}"),)
    async with grpc.aio.insecure_channel(site.manager.grpc_target) as channel:

        async def refused() -> bool:
            code, _ = await call_raw(channel, Method(f"{MGMT}/ListModels"), metadata)
            return code is grpc.StatusCode.PERMISSION_DENIED

        await eventually(refused, timeout_s=5)  # past the manager's 1 s key cache
    assert site.rest("GET", "/models", expired.value).status == 400
    # The API key still renews it (and the key file follows).
    renewed = site.rest("POST", "/token?type=management", site.keys().api.value)
    assert site.rest("GET", "/models", renewed.json()["management"]["key"]).status == 200
