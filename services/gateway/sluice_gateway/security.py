"""The gateway's security wiring: token authorization on both inference transports (inference key;
``grpc.health.v1`` and the REST API description exempt; metrics have no token, as in TorchServe) and
warnings for listeners reachable from the network.

``serve`` builds :func:`gateway_security` from the settings and hands its pieces to :class:`Gateway`
through the ``interceptors`` / ``rest_middlewares`` seams.
"""

from dataclasses import dataclass, field
from typing import Any

import grpc
from sluice.auth.grpc_interceptor import TokenAuthInterceptor
from sluice.auth.key_material import KeyKind
from sluice.auth.settings import TokenErrorCodes
from sluice.auth.store import TokenVerifier
from sluice.log import get_logger
from sluice.transport.exposure import check_listener
from sluice.transport.http_listener import parse_address

from sluice_gateway.broker.token_keys import RedisTokenKeys
from sluice_gateway.settings import GatewaySettings

log = get_logger(__name__)


@dataclass
class GatewaySecurity:
    interceptors: list[grpc.aio.ServerInterceptor] = field(default_factory=list)
    verifier: TokenVerifier | None = None
    codes: TokenErrorCodes | None = None
    _token_keys: RedisTokenKeys | None = None

    def rest_middlewares(self) -> list[Any]:
        """The REST listener's middlewares, built when it starts: aiohttp is imported then, after the
        gRPC server already serves (it is a large part of the gateway's start time)."""
        if self.verifier is None or self.codes is None:
            return []
        from sluice.auth.http_middleware import inference_scope, token_middleware

        return [token_middleware(self.verifier, inference_scope, self.codes)]

    async def aclose(self) -> None:
        if self._token_keys is not None:
            await self._token_keys.aclose()


def gateway_security(settings: GatewaySettings) -> GatewaySecurity:
    if not settings.token_auth_enabled:
        log.warning("token authorization is OFF (disable_token_authorization): any caller can infer")
        return GatewaySecurity()
    token_keys = RedisTokenKeys(settings.redis_url)
    verifier = TokenVerifier(token_keys.store, cache_s=settings.token_cache_s)
    codes = settings.token_error_codes
    return GatewaySecurity(
        interceptors=[TokenAuthInterceptor(verifier, KeyKind.INFERENCE, codes=codes)],
        verifier=verifier,
        codes=codes,
        _token_keys=token_keys,
    )


def warn_exposure(settings: GatewaySettings) -> None:
    """A WARNING for each listener that is not bound to loopback."""
    auth = settings.token_auth_enabled
    check_listener(
        "gateway",
        "grpc_inference",
        settings.grpc_inference_address,
        token_auth=auth,
        tls=settings.enable_grpc_ssl,
    )
    rest_tls = parse_address(settings.inference_address).tls
    check_listener(
        "gateway", "inference_address", _host(settings.inference_address), token_auth=auth, tls=rest_tls
    )
    if settings.enable_metrics_api:
        check_listener("gateway", "metrics_address", _host(settings.metrics_address), token_auth=None)


def _host(address: str) -> str:
    parsed = parse_address(address)
    return f"unix:{parsed.unix_path}" if parsed.unix_path else parsed.host
