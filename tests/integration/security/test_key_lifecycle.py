"""Key lifecycle on a real Redis: the manager's startup (KeyAuthority.prepare), the key file, renewal
through POST /token (API key) and its effect on a running gateway."""

import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import aiohttp
import grpc
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.typedefs import Middleware
from sluice.auth.http_middleware import management_scope, token_middleware
from sluice.auth.key_material import KeyKind, KeySet, digest, read_key_file
from sluice.auth.store import TokenStore, TokenVerifier
from sluice.errors import SluiceError
from sluice_manager.api.token_api import TokenRoutes
from sluice_manager.api.token_keys import KeyAuthority

from tests.support.token_matrix import AUTH_FAILED, Method, call_raw, granted

PING = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")


def authority(redis: "aioredis.Redis", path: Path, **kw: object) -> KeyAuthority:
    return KeyAuthority(TokenStore(redis), path, expiration_min=60, **kw)  # type: ignore[arg-type]


async def test_prepare_writes_a_0600_key_file_and_only_digests_to_redis(
    redis_client: "aioredis.Redis", tmp_path: Path
) -> None:
    path = tmp_path / "key_file.json"
    keyset = await authority(redis_client, path).prepare()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(path.read_text())
    assert set(document) == {"management", "inference", "API"}
    assert document["inference"]["key"] == keyset.inference.value
    stored = cast(dict[bytes, bytes], await redis_client.hgetall("sluice:auth:keys"))
    dumped = b" ".join([*stored.keys(), *stored.values()])
    for kind in KeyKind:
        assert keyset.get(kind).value.encode() not in dumped  # never the plaintext
        assert stored[kind.value.encode()] == digest(keyset.get(kind).value).encode()


async def test_prepare_keeps_matching_keys_and_replaces_foreign_ones(
    redis_client: "aioredis.Redis", tmp_path: Path
) -> None:
    path = tmp_path / "key_file.json"
    first = await authority(redis_client, path).prepare()
    assert await authority(redis_client, path).prepare() == first  # a manager restart keeps them
    path.unlink()
    second = await authority(redis_client, path).prepare()  # e.g. after `sluice stop`
    assert second.inference != first.inference
    assert read_key_file(path) == second


async def test_prepare_renews_expired_keys(redis_client: "aioredis.Redis", tmp_path: Path) -> None:
    path = tmp_path / "key_file.json"
    old = await authority(redis_client, path, clock=lambda: 1_000.0).prepare()
    renewed = await authority(redis_client, path).prepare()
    assert renewed.api == old.api
    assert renewed.inference != old.inference
    assert renewed.management != old.management
    assert read_key_file(path) == renewed


@pytest.fixture
async def manager_rest(
    redis_client: "aioredis.Redis", tmp_path: Path
) -> AsyncIterator[tuple[aiohttp.ClientSession, KeyAuthority, KeySet]]:
    """The management REST pieces this module owns: the token middleware and POST /token."""
    verifier = TokenVerifier(TokenStore(redis_client), cache_s=1.0)
    keys = authority(redis_client, tmp_path / "key_file.json", on_change=verifier.invalidate)
    keyset = await keys.prepare()

    @web.middleware
    async def errors(request: web.Request, handler: object) -> web.StreamResponse:
        try:
            return await handler(request)  # type: ignore[operator,no-any-return]
        except SluiceError as error:
            return web.json_response(
                {"status": error.http_status, "message": error.message}, status=error.http_status
            )

    # token_middleware is declared as a plain Callable; the function it returns has aiohttp's named
    # (request, handler) parameters, which aiohttp's Middleware protocol asks for.
    check_tokens = cast(Middleware, token_middleware(verifier, management_scope, "torchserve"))
    app = web.Application(middlewares=[errors, check_tokens])
    app.add_routes(TokenRoutes(keys).routes())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
        yield session, keys, keyset
    await runner.cleanup()


@pytest.fixture
def keyset(manager_rest: tuple[aiohttp.ClientSession, KeyAuthority, KeySet]) -> KeySet:
    """The secured gateway checks the keys the manager pieces created (not a separate set)."""
    return manager_rest[2]


async def test_token_renewal_needs_the_api_key(
    manager_rest: tuple[aiohttp.ClientSession, KeyAuthority, KeySet],
) -> None:
    session, _, keyset = manager_rest
    for token in (None, keyset.management.value, keyset.inference.value, "nope"):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with session.post("/token?type=inference", headers=headers) as response:
            assert (response.status, (await response.json())["message"]) == (400, AUTH_FAILED)
    api = {"Authorization": f"Bearer {keyset.api.value}"}
    async with session.post("/token?type=bogus", headers=api) as response:
        assert response.status == 400
    async with session.post("/token", headers=api) as response:
        assert response.status == 400


async def test_renewal_invalidates_the_old_key_everywhere(
    manager_rest: tuple[aiohttp.ClientSession, KeyAuthority, KeySet], grpc_channel: grpc.aio.Channel
) -> None:
    session, keys, keyset = manager_rest
    assert (await call_raw(grpc_channel, PING, granted(keyset, KeyKind.INFERENCE).metadata))[
        0
    ] is grpc.StatusCode.OK
    api = {"Authorization": f"Bearer {keyset.api.value}"}
    async with session.post("/token?type=inference", headers=api) as response:
        assert response.status == 200
        new_key = (await response.json())["inference"]["key"]
    assert new_key != keyset.inference.value
    on_file = read_key_file(keys.key_file)
    assert on_file is not None
    assert on_file.inference.value == new_key
    assert on_file.api == keyset.api
    old = await call_raw(grpc_channel, PING, granted(keyset, KeyKind.INFERENCE).metadata)
    assert old == (grpc.StatusCode.PERMISSION_DENIED, AUTH_FAILED)
    fresh = (("authorization", f"Bearer {new_key}"),)
    assert (await call_raw(grpc_channel, PING, fresh))[0] is grpc.StatusCode.OK
    # The management key is renewed the same way; the renewal of one leaves the other alone.
    async with session.post("/token?type=management", headers=api) as response:
        assert response.status == 200
    assert (await call_raw(grpc_channel, PING, fresh))[0] is grpc.StatusCode.OK
