"""Reading protobuf's wire format field by field over a buffer, without copying length-delimited
values: what lets a payload of megabytes reach the handler with one copy (the one into the
``bytearray`` TorchServe hands handlers) instead of one per message it is parsed through."""

from collections.abc import Iterator

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5
_FIXED_SIZES = {FIXED64: 8, FIXED32: 4}


class WireError(ValueError):
    """Bytes that are not a protobuf message."""


def _varint(buffer: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(buffer) or shift > 63:
            raise WireError("truncated or oversized varint")
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def fields(buffer: memoryview) -> Iterator[tuple[int, int, int | memoryview, int, int]]:
    """Each top-level field: its number, wire type, value (an int for varints, a view of the bytes
    otherwise), and where the whole field (tag included) starts and ends in ``buffer``."""
    position = 0
    while position < len(buffer):
        start = position
        tag, position = _varint(buffer, position)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | memoryview
        if wire_type == VARINT:
            value, position = _varint(buffer, position)
        elif wire_type == LENGTH_DELIMITED:
            length, position = _varint(buffer, position)
            if position + length > len(buffer):
                raise WireError("truncated length-delimited field")
            value = buffer[position : position + length]
            position += length
        elif wire_type in _FIXED_SIZES:
            size = _FIXED_SIZES[wire_type]
            if position + size > len(buffer):
                raise WireError("truncated fixed-size field")
            value = buffer[position : position + size]
            position += size
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        yield number, wire_type, value, start, position
