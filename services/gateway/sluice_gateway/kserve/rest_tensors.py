"""KServe v2 tensor data between JSON lists and the raw little-endian layout, without numpy: JSON
``data`` (flat or nested, row-major) is packed into the ``raw_input_contents`` form the gRPC path uses,
and raw outputs are unpacked into flat JSON lists. BYTES elements are 4-byte-length-prefixed; in JSON
they are strings, carried as their UTF-8 bytes (an element that is not UTF-8 has no JSON form: it
travels as binary tensor data)."""

import struct
from collections.abc import Iterable, Iterator
from typing import Any

from sluice.errors import ErrorCode, SluiceError

# struct codes of the fixed-size datatypes (BF16 is handled apart: the high half of an FP32).
_CODES = {
    "BOOL": "?",
    "UINT8": "B",
    "UINT16": "H",
    "UINT32": "I",
    "UINT64": "Q",
    "INT8": "b",
    "INT16": "h",
    "INT32": "i",
    "INT64": "q",
    "FP16": "e",
    "FP32": "f",
    "FP64": "d",
}
_LENGTH = struct.Struct("<I")


def _flatten(data: Any) -> Iterator[Any]:
    if isinstance(data, list):
        for item in data:
            yield from _flatten(item)
    else:
        yield data


def _bf16(value: float) -> bytes:
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
    return struct.pack("<H", (bits >> 16) & 0xFFFF)


def pack(datatype: str, data: Any, name: str) -> bytes:
    """JSON ``data`` of input ``name`` in raw form; INVALID_ARGUMENT when it does not fit the datatype."""
    values = list(_flatten(data))
    try:
        if datatype == "BYTES":
            return frame(_text(value, index) for index, value in enumerate(values))
        if datatype == "BF16":
            return b"".join(_bf16(float(v)) for v in values)
        code = _CODES.get(datatype)
        if code is None:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT, f"unsupported datatype '{datatype}' for input '{name}'"
            )
        return struct.pack(f"<{len(values)}{code}", *values)
    except (struct.error, TypeError, ValueError) as exc:
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT, f"unable to parse 'data' of input '{name}' as {datatype}: {exc}"
        ) from exc


def _text(value: Any, index: int) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"element {index} is not a string (send other bytes as binary data)")
    return value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, a ValueError


def frame(elements: Iterable[bytes]) -> bytes:
    """BYTES elements in raw form."""
    return b"".join(_LENGTH.pack(len(item)) + item for item in elements)


def json_data(datatype: str, raw: bytes) -> list[Any] | None:
    """Raw output bytes as a flat JSON list (BYTES as strings, BOOL as true/false), or None when JSON
    cannot hold them: a BYTES element that is not UTF-8."""
    if datatype == "BYTES":
        try:
            return [item.decode("utf-8") for item in split_bytes(raw)]
        except UnicodeDecodeError:
            return None
    if datatype == "BF16":
        return [struct.unpack("<f", b"\x00\x00" + raw[i : i + 2])[0] for i in range(0, len(raw) - 1, 2)]
    code = _CODES.get(datatype)
    if code is None:
        raise SluiceError(ErrorCode.INTERNAL, f"the model answered unknown datatype '{datatype}'")
    size = struct.calcsize(code)
    if len(raw) % size:
        raise SluiceError(
            ErrorCode.INTERNAL, f"output of {len(raw)} bytes is not a whole number of {datatype}"
        )
    return list(struct.unpack(f"<{len(raw) // size}{code}", raw))


def split_bytes(raw: bytes) -> list[bytes]:
    items, pos = [], 0
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise SluiceError(ErrorCode.INTERNAL, "truncated BYTES output")
        (length,) = _LENGTH.unpack_from(raw, pos)
        pos += 4
        items.append(raw[pos : pos + length])
        pos += length
    if pos != len(raw):
        raise SluiceError(ErrorCode.INTERNAL, "truncated BYTES output")
    return items
