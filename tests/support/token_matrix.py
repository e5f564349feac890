"""The token matrix: every way of presenting (or not) a token, and raw calls to any gRPC method.

Imports no ``sluice.v1`` module, so the compat tier (TorchServe's own protos) can use it too. Raw calls
send a serialized request (empty by default) without a stub: the interceptor decides before any
request is parsed, so one helper covers every method of every service.
"""

import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from sluice.auth.key_material import KeyKind, KeySet

AUTH_FAILED = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"
REFUSED_CODES = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Presentation:
    name: str
    metadata: Metadata


def refused_presentations(keyset: KeySet, scope: KeyKind) -> list[Presentation]:
    """Every presentation that must be refused for ``scope`` (expired keys: see the tests)."""
    right = keyset.get(scope).value
    found = [
        Presentation("no token", ()),
        Presentation("malformed header", (("authorization", f"Token {right}"),)),
        Presentation("bearer without token", (("authorization", "Bearer"),)),
        Presentation("token without bearer", (("authorization", right),)),
        Presentation(
            "two headers", (("authorization", f"Bearer {right}"), ("authorization", f"Bearer {right}"))
        ),
        Presentation("wrong token", (("authorization", f"Bearer {secrets.token_urlsafe(32)}"),)),
        Presentation("right key plus junk", (("authorization", f"Bearer {right}x"),)),
    ]
    for other in KeyKind:
        if other is not scope:
            found.append(
                Presentation(f"{other.value} key", (("authorization", f"Bearer {keyset.get(other).value}"),))
            )
    return found


def granted(keyset: KeySet, scope: KeyKind) -> Presentation:
    return Presentation("right key", (("authorization", f"Bearer {keyset.get(scope).value}"),))


@dataclass(frozen=True)
class Method:
    path: str
    client_streaming: bool = False
    server_streaming: bool = False


async def _requests(request: bytes) -> AsyncIterator[bytes]:
    yield request


# grpc.aio's client (grpcio 1.82) replaces the server's status with this one when a request write
# fails because the server already ended the call (grpc/grpc#36066; fix proposed in #43486): a
# token refusal on a client-streaming method races the client's first write.
_LOST_STATUS = (grpc.StatusCode.INTERNAL, "Internal error from Core")
_LOST_STATUS_ATTEMPTS = 3


async def call_raw(
    channel: grpc.aio.Channel,
    method: Method,
    metadata: Metadata,
    *,
    request: bytes = b"",
    timeout_s: float = 5.0,
) -> tuple[grpc.StatusCode, str]:
    """Call ``method`` with one serialized request; the final status code and details.

    A client-streaming call whose status the client library lost (see ``_LOST_STATUS``) is made
    again, a bounded number of times.
    """
    attempts = _LOST_STATUS_ATTEMPTS if method.client_streaming else 1
    for _ in range(attempts):
        outcome = await _call_once(channel, method, metadata, request, timeout_s)
        if outcome != _LOST_STATUS:
            break
    return outcome


async def _call_once(
    channel: grpc.aio.Channel, method: Method, metadata: Metadata, request: bytes, timeout_s: float
) -> tuple[grpc.StatusCode, str]:
    # Each kind of multicallable has its own type; the call below fits all four.
    kind: Any = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[(method.client_streaming, method.server_streaming)]
    multicallable = kind(method.path, request_serializer=None, response_deserializer=None)
    argument = _requests(request) if method.client_streaming else request
    try:
        call = multicallable(argument, metadata=metadata, timeout=timeout_s)
        if method.server_streaming:
            async for _ in call:
                pass
        else:
            await call
        return grpc.StatusCode.OK, ""
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""


def methods_of(
    service_descriptors: Sequence[object], extra_names: dict[str, str] | None = None
) -> list[Method]:
    """Every method of the given protobuf service descriptors (``extra_names``: the same service
    served under another full name, e.g. TorchServe's OIP name)."""
    found: list[Method] = []
    for service in service_descriptors:
        names = [service.full_name]  # type: ignore[attr-defined]
        if extra_names and service.full_name in extra_names:  # type: ignore[attr-defined]
            names.append(extra_names[service.full_name])  # type: ignore[attr-defined]
        for name in names:
            for method in service.methods:  # type: ignore[attr-defined]
                found.append(
                    Method(f"/{name}/{method.name}", method.client_streaming, method.server_streaming)
                )
    return found
