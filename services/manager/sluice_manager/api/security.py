"""The manager's security wiring: token authorization on both management transports (management key;
``/token`` (GET or POST) takes the API key; ``grpc.health.v1`` and the REST API description exempt), the key
file, and warnings for listeners reachable from the network. The model-API switch is checked by the
management service itself (:mod:`sluice_manager.api.model_api`).
"""

from dataclasses import dataclass, field

import redis.asyncio as aioredis
from sluice.auth.grpc_interceptor import TokenAuthInterceptor
from sluice.auth.http_middleware import management_scope, token_middleware
from sluice.auth.key_material import KeyKind
from sluice.auth.store import TokenStore, TokenVerifier
from sluice.log import get_logger
from sluice.transport.exposure import check_listener
from sluice.transport.http_listener import parse_address

from sluice_manager.api.management_api import ApiSeams
from sluice_manager.api.token_api import TokenRoutes
from sluice_manager.api.token_keys import KeyAuthority
from sluice_manager.settings import ManagerSettings

log = get_logger(__name__)


@dataclass
class ManagerSecurity:
    seams: ApiSeams = field(default_factory=ApiSeams)
    authority: KeyAuthority | None = None

    async def prepare_keys(self) -> None:
        """Create (or keep) the keys and the key file; before the management API serves."""
        if self.authority is not None:
            await self.authority.prepare()


def manager_security(settings: ManagerSettings, redis: "aioredis.Redis") -> ManagerSecurity:
    if not settings.token_auth_enabled:
        log.warning("token authorization is OFF (disable_token_authorization): any caller can manage models")
        return ManagerSecurity()
    store = TokenStore(redis)
    verifier = TokenVerifier(store, cache_s=settings.token_cache_s)
    authority = KeyAuthority(
        store, settings.key_file, expiration_min=settings.token_expiration_min, on_change=verifier.invalidate
    )
    codes = settings.token_error_codes
    seams = ApiSeams(
        grpc_interceptors=[TokenAuthInterceptor(verifier, KeyKind.MANAGEMENT, codes=codes)],
        rest_middlewares=[token_middleware(verifier, management_scope, codes)],
        rest_routes=TokenRoutes(authority).routes(),
    )
    return ManagerSecurity(seams, authority)


def warn_exposure(settings: ManagerSettings) -> None:
    """A WARNING for each management listener that is not bound to loopback."""
    auth = settings.token_auth_enabled
    check_listener(
        "manager",
        "grpc_management",
        settings.grpc_management_address,
        token_auth=auth,
        tls=settings.enable_grpc_ssl,
    )
    rest = parse_address(settings.management_address)
    host = f"unix:{rest.unix_path}" if rest.unix_path else rest.host
    check_listener("manager", "management_address", host, token_auth=auth, tls=rest.tls)
