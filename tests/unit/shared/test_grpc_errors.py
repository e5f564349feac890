"""The one place errors become gRPC statuses: every handler of a service wrapped at registration."""

from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest
from sluice.errors import ErrorCode, SluiceError, Unavailable
from sluice.transport.grpc_errors import StatusMapping, add_service, plain_details


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self) -> None:
        self.aborted: tuple[Any, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted


class FakeServer:
    def __init__(self) -> None:
        self.generic: list[Any] = []
        self.registered: dict[str, dict[str, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: tuple[Any, ...]) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.registered[service] = handlers


class Down(Exception):
    pass


async def not_found(request: bytes, context: Any) -> bytes:
    raise SluiceError(ErrorCode.MODEL_NOT_FOUND, "Model not found: m")


async def explode(request: bytes, context: Any) -> bytes:
    raise KeyError("secret detail")


async def one_then_fail(request: bytes, context: Any) -> AsyncIterator[bytes]:
    yield b"one"
    raise SluiceError(ErrorCode.HANDLER_FAILED, "Prediction failed", 503)


async def aborted_with(mapping: StatusMapping, method: Any) -> tuple[Any, str] | None:
    context = FakeContext()
    with pytest.raises(Aborted):
        await mapping.unary(method)(b"", cast(Any, context))
    return context.aborted


async def test_domain_errors_map_with_torchserve_details_by_default() -> None:
    assert await aborted_with(StatusMapping(), not_found) == (
        grpc.StatusCode.NOT_FOUND,
        "Model not found: m\norg.pytorch.serve.archive.model.ModelNotFoundException",
    )


async def test_plain_details_are_the_bare_message() -> None:
    mapping = StatusMapping(details=plain_details)
    assert await aborted_with(mapping, not_found) == (grpc.StatusCode.NOT_FOUND, "Model not found: m")


async def test_unexpected_errors_become_a_generic_internal() -> None:
    assert await aborted_with(StatusMapping(), explode) == (
        grpc.StatusCode.INTERNAL,
        "Internal server error\norg.pytorch.serve.http.InternalServerException",
    )


async def test_a_dependency_that_is_down_is_unavailable() -> None:
    async def method(request: bytes, context: Any) -> bytes:
        raise Down("connection refused")

    mapping = StatusMapping(unavailable=Unavailable((Down,), "registry unreachable"))
    code, details = await aborted_with(mapping, method) or (None, "")
    assert (code, details.split("\n")[0]) == (grpc.StatusCode.UNAVAILABLE, "registry unreachable")
    assert await aborted_with(StatusMapping(), method) == (
        grpc.StatusCode.INTERNAL,
        "Internal server error\norg.pytorch.serve.http.InternalServerException",
    )


async def test_streaming_wrapper_maps_errors_after_messages() -> None:
    context: Any = FakeContext()
    received = []
    with pytest.raises(Aborted):  # noqa: PT012 - the messages before the error matter too
        async for message in StatusMapping().streaming(one_then_fail)(b"", context):
            received.append(message)
    assert received == [b"one"]
    assert context.aborted is not None
    assert context.aborted[0] == grpc.StatusCode.UNAVAILABLE


async def test_add_service_guards_every_handler_of_every_kind_under_each_name() -> None:
    async def echo(request: bytes, context: Any) -> bytes:
        return request

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(not_found, request_deserializer=bytes),
        "ClientStream": grpc.stream_unary_rpc_method_handler(not_found),
        "ServerStream": grpc.unary_stream_rpc_method_handler(one_then_fail, response_serializer=bytes),
        "Bidi": grpc.stream_stream_rpc_method_handler(one_then_fail),
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
    }
    server: Any = FakeServer()
    add_service(server, ["a.Service", "b.Service"], handlers, StatusMapping(details=plain_details))
    assert len(server.generic) == 2
    assert set(server.registered) == {"a.Service", "b.Service"}
    guarded = server.registered["a.Service"]
    assert guarded["Unary"].request_deserializer is bytes
    assert guarded["ServerStream"].response_serializer is bytes
    assert await guarded["Echo"].unary_unary(b"x", FakeContext()) == b"x"
    for name, behavior in [("Unary", "unary_unary"), ("ClientStream", "stream_unary")]:
        context = FakeContext()
        with pytest.raises(Aborted):
            await getattr(guarded[name], behavior)(b"", context)
        assert context.aborted == (grpc.StatusCode.NOT_FOUND, "Model not found: m"), name
    for name, behavior in [("ServerStream", "unary_stream"), ("Bidi", "stream_stream")]:
        context = FakeContext()
        with pytest.raises(Aborted):
            async for _ in getattr(guarded[name], behavior)(b"", context):
                pass
        assert context.aborted == (grpc.StatusCode.UNAVAILABLE, "Prediction failed"), name
