"""The KServe v2 tensor codec: wire tensors <-> numpy arrays / torch tensors. The only module where
numpy meets the wire.

Wire forms: raw bytes (little-endian, row-major; BYTES elements each a 4-byte little-endian length plus
the bytes; BF16 the upper half of an IEEE float32) and typed ``InferTensorContents``. A handler sees
inputs either as TorchServe's OIP JSON (``body`` rows, flat ``data`` lists) or as arrays
(``tensor_handler: true``). numpy has no bfloat16: BF16 arrays are float32 (torch tensors are
torch.bfloat16).

BYTES in JSON, both ways alike so that a handler can return what it was given: an element that is valid
UTF-8 is a ``str`` (what a REST client sent as a JSON string arrives as sent), any other element is
``{"b64": "<standard base64>"}`` (JSON cannot hold arbitrary bytes); an output element given as a
``str`` is sent as its UTF-8 bytes and a ``{"b64": ...}`` one as the bytes it encodes.

Outputs are carried between the handler call and the reply as :class:`WireTensor` (raw bytes);
:func:`tensor_result` packs a handler's ``{name: array}`` into bytes TorchServe passes through as-is.
"""

import base64
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from sluice.kserve.datatypes import BYTES, DATATYPES, element_count
from sluice.v1 import kserve_pb2 as pb

# Fixed-size datatypes (BF16 travels as uint16 bit patterns; see _bf16_*).
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),
}
_DATATYPE_OF_KIND = {
    np.dtype(d).newbyteorder("="): name for name, d in NUMPY_DTYPES.items() if name != "BF16"
}
# What each typed InferTensorContents field holds.
_TYPED_FIELD_DTYPES = {
    "bool_contents": np.dtype(np.bool_),
    "int_contents": np.dtype(np.int32),
    "int64_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint32),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype(np.float32),
    "fp64_contents": np.dtype(np.float64),
}
# The key of a BYTES element that is not UTF-8 in the JSON a handler sees and returns.
BINARY_ELEMENT_KEY = "b64"
# Marks bytes that hold a packed tensor set (a ModelInferResponse) rather than v2 JSON.
TENSOR_SET_MAGIC = b"\x00sluice-v2-tensors\x00"
_LENGTH = struct.Struct("<I")


class CodecError(ValueError):
    """Data that cannot be converted (client-safe message)."""


@dataclass(frozen=True, slots=True)
class WireTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes


# ---- Wire -> arrays ---------------------------------------------------------------------------


def input_arrays(
    request: pb.ModelInferRequest, shared: Mapping[str, bytearray] | None = None
) -> list[tuple[pb.ModelInferRequest.InferInputTensor, np.ndarray]]:
    """Every input as a numpy array of its shape (BYTES: object array of bytes; BF16: float32).
    ``shared``: the bytes of the inputs in shared memory, by name; the raw entries hold the others."""
    shared = shared or {}
    raws = iter(request.raw_input_contents)
    has_raw = bool(request.raw_input_contents)
    out = []
    for tensor in request.inputs:
        shape = tuple(tensor.shape)
        if tensor.name in shared:
            array = from_raw(tensor.datatype, shape, shared[tensor.name])
        elif has_raw:
            array = from_raw(tensor.datatype, shape, next(raws))
        else:
            array = from_typed(tensor.datatype, shape, tensor.contents)
        out.append((tensor, array))
    return out


def from_raw(datatype: str, shape: tuple[int, ...], raw: bytes | bytearray) -> np.ndarray:
    """A bytearray is taken as the array's own buffer; bytes are copied into one (the handler gets a
    writable array it owns)."""
    if datatype == BYTES:
        return _object_array(split_bytes(raw), shape)
    buffer = raw if isinstance(raw, bytearray) else bytearray(raw)
    array = np.frombuffer(buffer, dtype=NUMPY_DTYPES[datatype]).reshape(shape)
    return _bf16_to_float32(array) if datatype == "BF16" else array


def from_typed(datatype: str, shape: tuple[int, ...], contents: pb.InferTensorContents) -> np.ndarray:
    field = DATATYPES[datatype].contents_field
    if field is None:
        raise CodecError(f"{datatype} data must be sent raw")
    values = list(getattr(contents, field))
    if datatype == BYTES:
        return _object_array(values, shape)
    # int_contents / uint_contents narrow to INT8/16, UINT8/16 by their low bytes, as Triton does.
    return np.array(values, dtype=_TYPED_FIELD_DTYPES[field]).astype(NUMPY_DTYPES[datatype]).reshape(shape)


def split_bytes(raw: bytes | bytearray) -> list[bytes]:
    """BYTES raw data into its elements (the gateway validated the framing of raw entries; bytes read
    from shared memory are checked here)."""
    elements, offset = [], 0
    while offset < len(raw):
        if len(raw) - offset < _LENGTH.size:
            raise CodecError("incomplete string length indicator in BYTES data")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        if len(raw) - offset < length:
            raise CodecError(f"incomplete string data in BYTES data: expected {length} bytes")
        elements.append(bytes(raw[offset : offset + length]))
        offset += length
    return elements


def _object_array(values: Sequence[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array.reshape(shape)


def to_torch(array: np.ndarray, datatype: str) -> Any:
    """A torch tensor for a decoded input (BF16 becomes torch.bfloat16; BYTES stay an object array)."""
    if datatype == BYTES:
        return array
    tensor = torch.from_numpy(array)
    return tensor.to(torch.bfloat16) if datatype == "BF16" else tensor


def json_input(tensor: pb.ModelInferRequest.InferInputTensor, array: np.ndarray) -> dict[str, Any]:
    """TorchServe's OIP form of one input: flat ``data`` list, BYTES elements as :func:`json_element`."""
    flat = array.reshape(-1)
    if tensor.datatype == BYTES:
        data: list[Any] = [json_element(bytes(item)) for item in flat]
    else:
        data = flat.tolist()
    return {"name": tensor.name, "shape": list(tensor.shape), "datatype": tensor.datatype, "data": data}


def json_element(item: bytes) -> str | dict[str, str]:
    """A BYTES element in a handler's JSON: its text when it is UTF-8, else ``{"b64": base64}``."""
    try:
        return item.decode("utf-8")
    except UnicodeDecodeError:
        return {BINARY_ELEMENT_KEY: base64.b64encode(item).decode("ascii")}


def parameter_value(parameter: pb.InferParameter) -> Any:
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


# ---- Arrays -> wire ---------------------------------------------------------------------------


def encode(name: str, value: Any, datatype: str | None = None) -> WireTensor:
    """An array, tensor, list or scalar as a raw wire tensor; ``datatype`` (the declared one) wins over
    the value's own dtype."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype is torch.bfloat16:
            datatype = datatype or "BF16"
            value = value.float()
        value = value.numpy()
    array = np.asarray(value) if datatype != BYTES else np.asarray(value, dtype=object)
    if array.dtype.kind in "SU" and not isinstance(value, np.ndarray):
        # numpy's fixed-width strings drop trailing NULs: keep a list's elements as given.
        array = np.asarray(value, dtype=object)
    datatype = datatype or datatype_of(array)
    return WireTensor(name, datatype, tuple(int(d) for d in array.shape), to_raw(array, datatype))


def datatype_of(array: np.ndarray) -> str:
    if array.dtype.kind in "OSU":
        return BYTES
    datatype = _DATATYPE_OF_KIND.get(array.dtype.newbyteorder("="))
    if datatype is None:
        raise CodecError(f"unsupported output dtype {array.dtype}")
    return datatype


def to_raw(array: np.ndarray, datatype: str) -> bytes:
    if datatype == BYTES:
        return b"".join(_LENGTH.pack(len(item)) + item for item in map(element_bytes, array.reshape(-1)))
    if datatype not in NUMPY_DTYPES:
        raise CodecError(f"unsupported datatype {datatype}")
    if datatype == "BF16":
        return _float32_to_bf16(array).tobytes()
    return np.ascontiguousarray(array, dtype=NUMPY_DTYPES[datatype]).tobytes()


def element_bytes(item: Any) -> bytes:
    """One BYTES output element: bytes as they are, a str as UTF-8, ``{"b64": base64}`` decoded (the
    inverse of :func:`json_element`)."""
    if isinstance(item, bytes | bytearray | np.bytes_):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, Mapping) and set(item) == {BINARY_ELEMENT_KEY}:
        encoded = item[BINARY_ELEMENT_KEY]
        try:
            return base64.b64decode(encoded, validate=True)  # binascii.Error is a ValueError
        except (TypeError, ValueError):
            raise CodecError(f"a {{{BINARY_ELEMENT_KEY!r}: ...}} element needs a base64 string") from None
    raise CodecError(
        f'BYTES elements must be bytes, str or {{"{BINARY_ELEMENT_KEY}": base64}}, got {type(item).__name__}'
    )


def from_json_output(output: Mapping[str, Any], declared: str | None = None) -> WireTensor:
    """One output of a v2 JSON response (``{"name","datatype","shape","data"}``; BYTES elements as
    :func:`element_bytes` reads them). Without a datatype: the declared one, else bool/int/float give
    BOOL/INT64/FP32 and str or ``{"b64": ...}`` elements BYTES."""
    name = output.get("name")
    if not isinstance(name, str):
        raise CodecError("every output needs a name")
    datatype = declared or output.get("datatype") or None
    data = output.get("data", [])
    if datatype is not None and datatype not in DATATYPES:
        raise CodecError(f"output '{name}' has an unknown datatype {datatype!r}")
    flat = np.asarray(_flatten(data), dtype=object)
    datatype = datatype or _json_datatype(flat)
    shape = output.get("shape")
    shape = tuple(int(d) for d in shape) if isinstance(shape, list) else np.shape(data)
    if element_count(shape) != flat.size:
        raise CodecError(f"output '{name}' has {flat.size} elements but shape {list(shape)}")
    try:
        array = flat if datatype == BYTES else flat.astype(_json_numpy(datatype))
    except (TypeError, ValueError, OverflowError):
        raise CodecError(f"output '{name}' has data that are not {datatype}") from None
    return WireTensor(name, datatype, tuple(shape), to_raw(array.reshape(shape), datatype))


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    for item in data:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def _json_datatype(flat: np.ndarray) -> str:
    items = flat.tolist()
    if items and all(isinstance(i, bool) for i in items):
        return "BOOL"
    if items and all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return "INT64"
    if items and all(isinstance(i, str | Mapping) for i in items):
        return BYTES
    return "FP32"


def _json_numpy(datatype: str) -> np.dtype[Any]:
    return np.dtype(np.float32) if datatype == "BF16" else NUMPY_DTYPES[datatype]


def _bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype("<u4") << 16).view("<f4")


def _float32_to_bf16(array: np.ndarray) -> np.ndarray:
    """Round to nearest even, as torch does (NaN stays NaN)."""
    bits = np.ascontiguousarray(array, dtype="<f4").view("<u4")
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(array.astype("<f4"))
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype("<u2")


# ---- Tensor sets and responses ----------------------------------------------------------------


def tensor_result(outputs: Mapping[str, Any], declared: Mapping[str, str] | None = None) -> bytes:
    """Pack ``{name: array | tensor}`` into bytes a handler can return (or pass to
    ``send_intermediate_predict_response``) for a KServe v2 request; TorchServe sends bytes as-is."""
    declared = declared or {}
    tensors = [encode(name, value, declared.get(name)) for name, value in outputs.items()]
    return TENSOR_SET_MAGIC + pack(tensors)


def pack(tensors: Iterable[WireTensor]) -> bytes:
    message = pb.ModelInferResponse()
    for tensor in tensors:
        message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        message.raw_output_contents.append(tensor.raw)
    return message.SerializeToString()


def unpack(data: bytes) -> list[WireTensor]:
    message = pb.ModelInferResponse.FromString(data)
    return [
        WireTensor(out.name, out.datatype, tuple(out.shape), raw)
        for out, raw in zip(message.outputs, message.raw_output_contents, strict=True)
    ]


def join_chunks(chunks: Sequence[Sequence[WireTensor]]) -> list[WireTensor]:
    """The outputs of a streamed answer's chunks as one answer, each output in order of first
    appearance: BYTES outputs of one shape in every chunk are joined element by element (a text
    model's tokens become its text); other outputs are concatenated along their first axis (a scalar
    counts as one element)."""
    by_name: dict[str, list[WireTensor]] = {}
    for chunk in chunks:
        for tensor in chunk:
            by_name.setdefault(tensor.name, []).append(tensor)
    return [_join_output(name, parts) for name, parts in by_name.items()]


def _join_output(name: str, parts: list[WireTensor]) -> WireTensor:
    datatypes = {part.datatype for part in parts}
    if len(datatypes) != 1:
        raise CodecError(f"the chunks of output '{name}' have different datatypes {sorted(datatypes)}")
    datatype = parts[0].datatype
    arrays = [from_raw(datatype, part.shape, part.raw) for part in parts]
    if datatype == BYTES and len({part.shape for part in parts}) == 1:
        joined = np.empty(arrays[0].size, dtype=object)
        joined[:] = [b"".join(items) for items in zip(*(a.reshape(-1) for a in arrays), strict=True)]
        return WireTensor(name, datatype, parts[0].shape, to_raw(joined.reshape(parts[0].shape), datatype))
    flat = [a.reshape(1) if a.ndim == 0 else a for a in arrays]
    if len({a.shape[1:] for a in flat}) != 1:
        raise CodecError(f"the chunks of output '{name}' differ in shape beyond their first axis")
    stacked = np.concatenate(flat, axis=0)
    return WireTensor(name, datatype, tuple(stacked.shape), to_raw(stacked, datatype))


def cast(tensor: WireTensor, datatype: str) -> WireTensor:
    """``tensor`` converted to ``datatype`` (a declared output type), element by element."""
    if tensor.datatype == datatype:
        return tensor
    if BYTES in (tensor.datatype, datatype):
        raise CodecError(f"output '{tensor.name}' is {tensor.datatype}, the model declares {datatype}")
    array = from_raw(tensor.datatype, tensor.shape, tensor.raw)
    return WireTensor(tensor.name, datatype, tensor.shape, to_raw(array, datatype))


def response(
    tensors: Sequence[WireTensor],
    *,
    typed: bool,
    shared: Mapping[str, Mapping[str, pb.InferParameter]] | None = None,
) -> pb.ModelInferResponse:
    """A ModelInferResponse with raw_output_contents, or typed contents when asked (FP16/BF16 have no
    typed field, so a response holding one stays raw).

    ``shared``: the outputs written into shared memory, with the parameters that named their region;
    they carry those parameters and no data. tritonclient finds an output's raw entry by its position,
    so such an output before one sent raw keeps an empty entry in its place."""
    shared = shared or {}
    message = pb.ModelInferResponse()
    sent = [t for t in tensors if t.name not in shared]
    typed = typed and all(DATATYPES[t.datatype].contents_field is not None for t in sent)
    placeholders = 0  # outputs in shared memory since the last raw entry
    for tensor in tensors:
        output = message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.name in shared:
            for key, value in shared[tensor.name].items():
                output.parameters[key].CopyFrom(value)
            placeholders += 1
        elif typed:
            field = DATATYPES[tensor.datatype].contents_field
            assert field is not None
            values = from_raw(tensor.datatype, tensor.shape, tensor.raw).reshape(-1).tolist()
            getattr(output.contents, field).extend(values)
        else:
            message.raw_output_contents.extend([b""] * placeholders + [tensor.raw])
            placeholders = 0
    return message
