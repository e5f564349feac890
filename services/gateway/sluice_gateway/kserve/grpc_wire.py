"""Protobuf wire-level helpers for the KServe messages the gateway forwards without parsing them.

The worker builds each ``ModelInferResponse``; the gateway only frames it: it appends fields (protobuf
merges a repeated/map field written twice, and a later scalar wins), wraps it as field 2 of a
``ModelStreamInferResponse``, and looks at its top-level field numbers to tell an empty response
(no outputs) from one with data, without decoding any tensor. Requests go to the worker as sent,
less the request-level parameters the gateway acts on itself (:func:`without_parameters`).
"""

from collections.abc import Collection, Iterator

from sluice.v1.kserve_pb2 import InferParameter, ModelInferResponse

_LENGTH_DELIMITED = 2
_INFER_RESPONSE_FIELD = 2  # ModelStreamInferResponse.infer_response
_OUTPUT_FIELDS = {5, 6}  # ModelInferResponse.outputs, raw_output_contents
_REQUEST_PARAMETERS_FIELD = 4  # ModelInferRequest.parameters: map entries {1: key, 2: value}

FINAL_RESPONSE = "triton_final_response"


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise WireError("truncated varint")


def _fields(data: bytes | memoryview) -> Iterator[tuple[int, int, int, int, int]]:
    """The top-level fields of a serialized message: (number, wire type, where the field starts,
    where its value starts, where it ends); contents are not decoded."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        value = pos
        if wire_type == 0:
            _, pos = _read_varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == _LENGTH_DELIMITED:
            length, value = _read_varint(data, pos)
            pos = value + length
        elif wire_type == 5:
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if pos > len(data):
            raise WireError("truncated field")
        yield number, wire_type, start, value, pos


def top_level_fields(data: bytes) -> set[int]:
    """Field numbers present at the top level of a serialized message (contents are skipped)."""
    return {number for number, *_rest in _fields(data)}


def without_parameters(request: bytes, names: Collection[str]) -> bytes:
    """A serialized ModelInferRequest less its request-level parameters named ``names``; every other
    field is kept byte for byte (tensors are copied, never decoded)."""
    view = memoryview(request)
    kept = bytearray()
    for number, wire_type, start, value, end in _fields(view):
        if (
            number == _REQUEST_PARAMETERS_FIELD
            and wire_type == _LENGTH_DELIMITED
            and _map_key(view[value:end]) in names
        ):
            continue
        kept += view[start:end]
    return bytes(kept)


def _map_key(entry: memoryview) -> str | None:
    """The string key of a serialized map entry (field 1), None when it has none."""
    for number, wire_type, _start, value, end in _fields(entry):
        if number == 1 and wire_type == _LENGTH_DELIMITED:
            return bytes(entry[value:end]).decode("utf-8", "replace")
    return None


def has_outputs(response: bytes) -> bool:
    """Whether a serialized ModelInferResponse carries any output."""
    return bool(top_level_fields(response) & _OUTPUT_FIELDS)


def final_flag(final: bool) -> bytes:
    """A serialized ``parameters{"triton_final_response": final}`` entry to append to a response."""
    return ModelInferResponse(
        parameters={FINAL_RESPONSE: InferParameter(bool_param=final)}
    ).SerializeToString()


def stream_response(response: bytes, *, final: bool) -> bytes:
    """A serialized ModelStreamInferResponse holding ``response`` plus its final-response flag."""
    body = response + final_flag(final)
    return varint(_INFER_RESPONSE_FIELD << 3 | _LENGTH_DELIMITED) + varint(len(body)) + body
