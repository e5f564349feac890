"""Token authorization switched off, and the standard status codes instead of TorchServe's."""

from typing import Any

import aiohttp
import grpc
import pytest
from sluice.auth.key_material import KeyKind, KeySet
from sluice_gateway.app import Gateway

from tests.support.token_matrix import AUTH_FAILED, Method, call_raw, granted

PING = Method("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping")
MODEL_READY = Method("/inference.GRPCInferenceService/ServerLive")


class TestDisabled:
    @pytest.fixture
    def security_overrides(self) -> dict[str, Any]:
        return {"disable_token_authorization": True}

    async def test_everything_answers_without_a_token(
        self, grpc_channel: grpc.aio.Channel, rest: aiohttp.ClientSession
    ) -> None:
        assert (await call_raw(grpc_channel, PING, ()))[0] is grpc.StatusCode.OK
        assert (await call_raw(grpc_channel, MODEL_READY, ()))[0] is grpc.StatusCode.OK
        async with rest.get("/ping") as response:
            assert response.status == 200


class TestStandardCodes:
    @pytest.fixture
    def security_overrides(self) -> dict[str, Any]:
        return {"token_error_codes": "standard"}

    async def test_grpc(self, grpc_channel: grpc.aio.Channel, keyset: KeySet) -> None:
        assert await call_raw(grpc_channel, PING, ()) == (grpc.StatusCode.UNAUTHENTICATED, AUTH_FAILED)
        wrong = (("authorization", "Bearer nope"),)
        assert (await call_raw(grpc_channel, PING, wrong))[0] is grpc.StatusCode.UNAUTHENTICATED
        management = granted(keyset, KeyKind.MANAGEMENT).metadata
        assert (await call_raw(grpc_channel, PING, management))[0] is grpc.StatusCode.PERMISSION_DENIED
        assert (await call_raw(grpc_channel, PING, granted(keyset, KeyKind.INFERENCE).metadata))[0] is (
            grpc.StatusCode.OK
        )

    async def test_rest(self, secure_gateway: Gateway, rest: aiohttp.ClientSession, keyset: KeySet) -> None:
        async with rest.get("/ping") as response:
            assert response.status == 401
            assert await response.json() == {
                "code": 401,
                "type": "InvalidKeyException",
                "message": AUTH_FAILED,
            }
        headers = {"Authorization": f"Bearer {keyset.management.value}"}
        async with rest.get("/ping", headers=headers) as response:
            assert response.status == 403
        async with rest.get("/v2/health/live", headers=headers) as response:
            assert (response.status, await response.json()) == (403, {"error": AUTH_FAILED})
