"""A KServe v2 inference request as the gateway checks it, independent of the transport that carried it.

The gRPC converter (``kserve/grpc_codec.py``) fills these from a ``ModelInferRequest``; the data
itself is never decoded (no numpy in the gateway): raw entries are kept as bytes for their lengths and
BYTES framing, typed contents only as element counts per ``InferTensorContents`` field.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.shared_memory import BYTE_SIZE, OFFSET, REGION

from sluice_gateway.broker.seam import SequenceStep

ParameterKind = Literal["bool", "int64", "string", "double", "uint64"]
ParameterValue = bool | int | str | float


@dataclass(frozen=True, slots=True)
class Parameter:
    # None: the parameter's oneof is not set.
    kind: ParameterKind | None
    value: ParameterValue | None = None


@dataclass(frozen=True, slots=True)
class SharedMemoryRef:
    """A tensor bound to a registered system shared-memory region (its ``shared_memory_*`` parameters)."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(frozen=True, slots=True)
class InputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    # Element count per non-empty InferTensorContents field; None when the input has no contents.
    typed_counts: Mapping[str, int] | None = None
    # Set when the input's bytes are in a shared-memory region (it then has no raw entry).
    shared_memory: SharedMemoryRef | None = None


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    parameters: Mapping[str, Parameter] = field(default_factory=dict)
    # Set when the output is to be written into a shared-memory region.
    shared_memory: SharedMemoryRef | None = None


@dataclass(frozen=True, slots=True)
class KServeRequest:
    model: str
    version: str
    request_id: str
    inputs: tuple[InputTensor, ...]
    # One entry per input not in shared memory, in order; empty when the inputs carry typed contents.
    raw_input_contents: tuple[bytes, ...] = ()
    outputs: tuple[RequestedOutput, ...] = ()
    parameters: Mapping[str, Parameter] = field(default_factory=dict)

    @property
    def uses_shared_memory(self) -> bool:
        return any(t.shared_memory for t in self.inputs) or any(o.shared_memory for o in self.outputs)


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """What the request-level parameters ask of the server."""

    # `timeout` (microseconds) as seconds; None when not set.
    timeout_s: float | None = None
    priority: int = 0
    # `triton_enable_empty_final_response`: streams send an empty final response.
    empty_final_response: bool = False
    # `binary_data_output` = false: answer with typed contents instead of raw_output_contents.
    typed_outputs: bool = False
    # The sequence the request names (`sequence_id`, `sequence_start`, `sequence_end`); None: none.
    sequence: SequenceStep | None = None


EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
BINARY_DATA_OUTPUT = "binary_data_output"
SEQUENCE_ID = "sequence_id"
SEQUENCE_START = "sequence_start"
SEQUENCE_END = "sequence_end"
# Triton's sequence parameters: the gateway acts on them, the handler sees TorchServe's sequence
# headers instead (they are not passed on as custom parameters).
SEQUENCE_PARAMETERS = frozenset({SEQUENCE_ID, SEQUENCE_START, SEQUENCE_END})
# Triton's correlation ids are uint64: a negative int64_param names the id it converts to.
_UINT64 = 2**64


def request_options(parameters: Mapping[str, Parameter]) -> RequestOptions:
    """Reserved parameters checked as Triton checks them; custom keys pass through to the handler."""
    for key in parameters:
        if key.startswith("triton_") and key != EMPTY_FINAL_RESPONSE:
            raise _invalid(
                f"parameter keys starting with 'triton_' are reserved for Triton usage; only "
                f"'{EMPTY_FINAL_RESPONSE}' is allowed, got '{key}'"
            )
    return RequestOptions(
        timeout_s=_timeout_s(parameters.get("timeout")),
        priority=_priority(parameters.get("priority")),
        empty_final_response=_flag(parameters, EMPTY_FINAL_RESPONSE, default=False),
        typed_outputs=not _flag(parameters, BINARY_DATA_OUTPUT, default=True),
        sequence=_sequence(parameters),
    )


def _sequence(parameters: Mapping[str, Parameter]) -> SequenceStep | None:
    """Triton's correlation id and its START / END flags; None when the request names no sequence
    (no `sequence_id`, or 0 or "", which Triton reads as none)."""
    start = _flag(parameters, SEQUENCE_START, default=False)
    end = _flag(parameters, SEQUENCE_END, default=False)
    parameter = parameters.get(SEQUENCE_ID)
    if parameter is None:
        return None
    value = parameter.value
    if parameter.kind in ("int64", "uint64") and isinstance(value, int) and not isinstance(value, bool):
        sequence_id = str(value % _UINT64) if value else ""
    elif parameter.kind == "string" and isinstance(value, str):
        sequence_id = value
    else:
        raise _invalid(
            f"invalid value type for '{SEQUENCE_ID}' parameter, expected int64_param or string_param."
        )
    return SequenceStep(sequence_id, start=start, end=end) if sequence_id else None


def _priority(parameter: Parameter | None) -> int:
    if parameter is None:
        return 0
    if parameter.kind not in ("int64", "uint64") or not isinstance(parameter.value, int):
        raise _invalid("invalid value type for 'priority' parameter, expected int64_param or uint64_param.")
    if parameter.value < 0:
        raise _invalid(
            f"invalid value for 'priority' parameter, expected a value >= 0, got {parameter.value}"
        )
    return parameter.value


def _timeout_s(parameter: Parameter | None) -> float | None:
    if parameter is None:
        return None
    if parameter.kind != "int64" or not isinstance(parameter.value, int):
        raise _invalid("invalid value type for 'timeout' parameter, expected int64_param.")
    if parameter.value < 0:
        raise _invalid(f"invalid value for 'timeout' parameter, expected a value >= 0, got {parameter.value}")
    return parameter.value / 1_000_000


def _flag(parameters: Mapping[str, Parameter], key: str, *, default: bool) -> bool:
    parameter = parameters.get(key)
    if parameter is None:
        return default
    if parameter.kind != "bool" or not isinstance(parameter.value, bool):
        raise _invalid(f"invalid value type for '{key}' parameter, expected bool_param.")
    return parameter.value


def _invalid(message: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, message)


def shared_memory_ref(tensor: str, parameters: Mapping[str, Parameter], kind: str) -> SharedMemoryRef | None:
    """The region an input or requested output (``kind``) names, None when it names none; Triton's
    parameter types: a string region, int64 (or uint64) byte size and offset."""
    region = parameters.get(REGION)
    size = parameters.get(BYTE_SIZE)
    offset = parameters.get(OFFSET)
    if region is None:
        if size is not None or offset is not None:
            raise _invalid(f"'{REGION}' must be specified with '{BYTE_SIZE}' for {kind} '{tensor}'")
        return None
    if region.kind != "string" or not isinstance(region.value, str) or not region.value:
        raise _invalid(
            f"invalid value type for '{REGION}' parameter for {kind} '{tensor}', expected string_param."
        )
    if size is None:
        raise _invalid(f"'{BYTE_SIZE}' must be specified with '{REGION}' for {kind} '{tensor}'")
    return SharedMemoryRef(
        region.value,
        _count(size, BYTE_SIZE, tensor, kind),
        0 if offset is None else _count(offset, OFFSET, tensor, kind),
    )


def _count(parameter: Parameter, key: str, tensor: str, kind: str) -> int:
    value = parameter.value
    if parameter.kind not in ("int64", "uint64") or not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(
            f"invalid value type for '{key}' parameter for {kind} '{tensor}', expected int64_param."
        )
    if value < 0:
        raise _invalid(f"invalid value for '{key}' parameter for {kind} '{tensor}', expected a value >= 0")
    return value
