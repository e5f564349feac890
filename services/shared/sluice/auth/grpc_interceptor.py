"""Token authorization for grpc.aio servers: one interceptor, used by the gateway (inference key) and
the manager (management key).

A call carries metadata ``authorization: Bearer <key>``. Every method of the server needs the key of
the interceptor's scope except the exempt services (by default ``grpc.health.v1.Health``, which load
balancers and ``sluice start`` probe without credentials). A refused call is closed before its request
is even parsed: the interceptor never hands it to the real handler, so unknown methods are refused the
same way as known ones (the method set is not revealed to callers without a key).
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable
from typing import Any, TypeAlias

import grpc

from sluice.auth.key_material import KeyKind
from sluice.auth.policy import Refusal, bearer_token, refusal
from sluice.auth.settings import TokenErrorCodes
from sluice.auth.store import TokenVerifier
from sluice.log import get_logger

log = get_logger(__name__)

# Not subscriptable at run time: the alias is a string.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

HEALTH_SERVICE = "grpc.health.v1.Health"
# How much of a refused call's request stream is read before the refusal goes out (see _deny_handler):
# an unauthenticated client holds a handler for this long at most.
DENY_DRAIN_MESSAGES = 16
DENY_DRAIN_S = 0.1
AUTHORIZATION = "authorization"


def service_of(method: str) -> str:
    """``/pkg.Service/Method`` -> ``pkg.Service``."""
    return method.lstrip("/").split("/", 1)[0]


def authorization_values(metadata: Iterable[tuple[str, Any]] | None) -> list[str]:
    found: list[str] = []
    for key, value in metadata or ():
        if key.lower() == AUTHORIZATION:
            found.append(value.decode("latin-1") if isinstance(value, bytes) else str(value))
    return found


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        verifier: TokenVerifier,
        scope: KeyKind,
        *,
        codes: TokenErrorCodes = "torchserve",
        exempt_services: Collection[str] = (HEALTH_SERVICE,),
    ) -> None:
        self._verifier = verifier
        self._scope = scope
        self._codes = codes
        self._exempt = frozenset(exempt_services)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable["Handler | None"]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> "Handler | None":
        method = handler_call_details.method
        if service_of(method) in self._exempt:
            return await continuation(handler_call_details)
        token = bearer_token(authorization_values(handler_call_details.invocation_metadata))
        verdict = await self._verifier.verify(self._scope, token)
        denied = refusal(verdict, self._codes)
        if denied is None:
            return await continuation(handler_call_details)
        log.info("call refused", method=method, reason=verdict.value, scope=self._scope.value)
        return _deny_handler(denied)


def _deny_handler(denied: Refusal) -> Handler:
    """A handler that refuses the call. Stream-stream with no deserializer fits every method kind
    and never parses the request.

    It reads what the client sends until the client half-closes (a few messages and a moment at
    most) before it answers: grpcio's asyncio client reports a write that fails because the server
    already ended the call as INTERNAL "Internal error from Core", overwriting the refusal it got
    (grpc/grpc#36066). Seen on bidi calls about one time in ten under load."""

    async def deny(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        await _drain(requests)
        context.set_code(denied.grpc_code)
        context.set_details(denied.message)

    return grpc.stream_stream_rpc_method_handler(deny)


async def _drain(requests: AsyncIterator[bytes]) -> None:
    try:
        async with asyncio.timeout(DENY_DRAIN_S):
            received = 0
            async for _ in requests:
                received += 1
                if received >= DENY_DRAIN_MESSAGES:
                    return
    except TimeoutError:
        return
