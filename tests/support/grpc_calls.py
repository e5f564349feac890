"""Typed reads of grpc.aio streaming calls: the stubs type ``read()`` as ``object`` (a message or EOF)."""

from typing import Any, TypeVar, cast

import grpc

T = TypeVar("T")


async def read_message(call: "grpc.aio.UnaryStreamCall[Any, T] | grpc.aio.StreamStreamCall[Any, T]") -> T:
    """The call's next message; the test fails if the stream ended instead."""
    message = await call.read()
    assert message is not grpc.aio.EOF, "the stream ended"
    return cast(T, message)
