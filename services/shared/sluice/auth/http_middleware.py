"""Token authorization for aiohttp applications: one middleware, used by the gateway's inference port
(inference key) and the manager's management port (management key; ``/token`` takes the API key).

A request carries ``Authorization: Bearer <key>``. The middleware runs after routing, so exemptions
follow the route that will actually run, not the raw path. Exempt, as in TorchServe: ``OPTIONS /`` and
``/api-description`` (the API description); the metrics port has no token at all. Anything else,
unknown paths included, needs the key before it learns more than "refused". A refusal is raised as a
:class:`~sluice.errors.SluiceError`, so the application's error middleware (outermost) writes it in
the port's error format.
"""

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from sluice.auth.key_material import KeyKind
from sluice.auth.policy import bearer_token, refusal
from sluice.auth.settings import TokenErrorCodes
from sluice.auth.store import TokenVerifier
from sluice.log import get_logger

log = get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]
# The key a request needs; None: none (an exempt route).
ScopeRule = Callable[[web.Request], KeyKind | None]

# (method or "*", route path): the routes TorchServe serves without a token.
PUBLIC_ROUTES = frozenset({("OPTIONS", "/"), ("*", "/api-description")})
TOKEN_ROUTE = "/token"


def route_path(request: web.Request) -> str | None:
    """The path pattern of the route that matched (``/models/{model}``), None when none did."""
    resource = request.match_info.route.resource
    return None if resource is None else resource.canonical


def is_public(request: web.Request) -> bool:
    path = route_path(request)
    return (request.method, path) in PUBLIC_ROUTES or ("*", path) in PUBLIC_ROUTES


def inference_scope(request: web.Request) -> KeyKind | None:
    return None if is_public(request) else KeyKind.INFERENCE


def management_scope(request: web.Request) -> KeyKind | None:
    if is_public(request):
        return None
    return KeyKind.API if route_path(request) == TOKEN_ROUTE else KeyKind.MANAGEMENT


def token_middleware(verifier: TokenVerifier, rule: ScopeRule, codes: TokenErrorCodes) -> Middleware:
    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        scope = rule(request)
        if scope is not None:
            token = bearer_token(request.headers.getall(hdrs.AUTHORIZATION, []))
            verdict = await verifier.verify(scope, token)
            denied = refusal(verdict, codes)
            if denied is not None:
                log.info("request refused", path=request.path, reason=verdict.value, scope=scope.value)
                raise denied.error()
        return await handler(request)

    return check_token
