"""The KServe v2 datatypes: element size, the ``InferTensorContents`` field that carries them typed, and
Triton's ``DataType`` enum name. Pure data (no numpy): the gateway validates with it, the worker's codec
maps it to numpy dtypes. Datatype strings are case-sensitive (spec: "All strings in all contexts are
case-sensitive")."""

from collections.abc import Iterable
from dataclasses import dataclass

BYTES = "BYTES"


@dataclass(frozen=True, slots=True)
class Datatype:
    name: str
    # Bytes per element in raw form; 0 for BYTES (each element is a 4-byte length plus its bytes).
    byte_size: int
    # InferTensorContents field for typed data; None: raw only (FP16, BF16).
    contents_field: str | None
    # model_config.proto DataType enum name.
    triton_type: str


DATATYPES: dict[str, Datatype] = {
    d.name: d
    for d in (
        Datatype("BOOL", 1, "bool_contents", "TYPE_BOOL"),
        Datatype("UINT8", 1, "uint_contents", "TYPE_UINT8"),
        Datatype("UINT16", 2, "uint_contents", "TYPE_UINT16"),
        Datatype("UINT32", 4, "uint_contents", "TYPE_UINT32"),
        Datatype("UINT64", 8, "uint64_contents", "TYPE_UINT64"),
        Datatype("INT8", 1, "int_contents", "TYPE_INT8"),
        Datatype("INT16", 2, "int_contents", "TYPE_INT16"),
        Datatype("INT32", 4, "int_contents", "TYPE_INT32"),
        Datatype("INT64", 8, "int64_contents", "TYPE_INT64"),
        Datatype("FP16", 2, None, "TYPE_FP16"),
        Datatype("FP32", 4, "fp32_contents", "TYPE_FP32"),
        Datatype("FP64", 8, "fp64_contents", "TYPE_FP64"),
        Datatype(BYTES, 0, "bytes_contents", "TYPE_STRING"),
        Datatype("BF16", 2, None, "TYPE_BF16"),
    )
}

# Every InferTensorContents field, in field-number order.
CONTENTS_FIELDS = (
    "bool_contents",
    "int_contents",
    "int64_contents",
    "uint_contents",
    "uint64_contents",
    "fp32_contents",
    "fp64_contents",
    "bytes_contents",
)


def element_count(shape: Iterable[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def shape_text(shape: Iterable[int]) -> str:
    """Triton's rendering of a shape in messages: ``[-1,16]``."""
    return "[" + ",".join(str(dim) for dim in shape) + "]"
