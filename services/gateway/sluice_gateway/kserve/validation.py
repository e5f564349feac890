"""KServe v2 request validation, before anything is enqueued: pure functions, no numpy, no transport.

Two layers, both raising INVALID_ARGUMENT with Triton's wording where Triton has one
(shared/research/kserve_v2.md 2.1-2.4):

- :func:`check_tensors` — the request is well formed: known datatypes, raw vs typed data, raw entry
  count, byte sizes, typed element counts, BYTES framing, BOOL bytes, unique input names.
- :func:`check_against_model` — the request fits what the model declares (``sluice:`` section of
  model-config.yaml): input names, datatypes, shapes, batch dimension, requested outputs. A model that
  declares nothing accepts any well-formed request.
"""

import struct
from collections.abc import Mapping

from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.datatypes import BYTES, DATATYPES, element_count, shape_text
from sluice.kserve.declaration import ModelTensors, TensorSpec

from sluice_gateway.kserve.request import InputTensor, KServeRequest, RequestedOutput

_LENGTH = struct.Struct("<I")


def check_request(request: KServeRequest, tensors: ModelTensors) -> None:
    check_tensors(request)
    check_against_model(request, tensors)


def check_tensors(request: KServeRequest) -> None:
    model = request.model
    raw = request.raw_input_contents
    names = [tensor.name for tensor in request.inputs]
    for tensor in request.inputs:
        if names.count(tensor.name) > 1:
            raise _invalid(f"input '{tensor.name}' is specified more than once for model '{model}'")
        _check_datatype_and_shape(tensor, model)
        if tensor.shared_memory is not None:
            _check_shared(tensor, model)
    # Inputs in shared memory take no raw entry (Triton's rule).
    sent = [tensor for tensor in request.inputs if tensor.shared_memory is None]
    if raw:
        _check_raw_layout(request, sent)
        for tensor, data in zip(sent, raw, strict=True):
            check_raw(tensor, data, model)
        return
    for tensor in sent:
        _check_typed(tensor, model)


def _check_shared(tensor: InputTensor, model: str) -> None:
    """An input in shared memory: no contents beside it, and the byte size its shape takes (BYTES
    framing is checked where the bytes are read, by the worker)."""
    assert tensor.shared_memory is not None
    if tensor.typed_counts is not None:
        raise _invalid(
            f"contents field must not be specified when using shared memory for input '{tensor.name}' "
            f"for model '{model}'"
        )
    if tensor.datatype == BYTES:
        return
    size = DATATYPES[tensor.datatype].byte_size * element_count(tensor.shape)
    if tensor.shared_memory.byte_size != size:
        raise _invalid(
            f"input byte size mismatch for input '{tensor.name}' for model '{model}'. "
            f"Expected {size}, got {tensor.shared_memory.byte_size}"
        )


def _check_datatype_and_shape(tensor: InputTensor, model: str) -> None:
    if tensor.datatype not in DATATYPES:
        raise _invalid(
            f"unsupported datatype '{tensor.datatype}' for input '{tensor.name}' for model '{model}'; "
            f"expected one of {', '.join(DATATYPES)}"
        )
    if any(dim < 0 for dim in tensor.shape):
        raise _invalid(
            f"unexpected shape for input '{tensor.name}' for model '{model}': dimensions must be >= 0, "
            f"got {shape_text(tensor.shape)}"
        )


def _check_raw_layout(request: KServeRequest, sent: list[InputTensor]) -> None:
    for tensor in sent:
        if tensor.typed_counts is not None:
            raise _invalid(
                f"contents field must not be specified when using raw_input_contents for '{tensor.name}' "
                f"for model '{request.model}'"
            )
    if len(request.raw_input_contents) != len(sent):
        raise _invalid(
            f"the number of inputs ({len(sent)}) does not match the expected number of raw "
            f"input contents ({len(request.raw_input_contents)}) for model '{request.model}'"
        )


def check_raw(tensor: InputTensor, data: bytes, model: str) -> None:
    """One raw entry against its input's datatype and shape."""
    expected = element_count(tensor.shape)
    if tensor.datatype == BYTES:
        _check_bytes_framing(tensor.name, data, expected, model)
        return
    size = DATATYPES[tensor.datatype].byte_size * expected
    if len(data) != size:
        raise _invalid(
            f"input byte size mismatch for input '{tensor.name}' for model '{model}'. "
            f"Expected {size}, got {len(data)}"
        )
    if tensor.datatype == "BOOL" and data.translate(None, b"\x00\x01"):
        raise _invalid(
            f"invalid BOOL data for input '{tensor.name}' for model '{model}': bytes must be 0 or 1"
        )


def _check_bytes_framing(name: str, data: bytes, expected: int, model: str) -> None:
    """BYTES raw data: each element a 4-byte little-endian length and that many bytes."""
    count, offset, end = 0, 0, len(data)
    while offset < end:
        if end - offset < _LENGTH.size:
            raise _invalid(
                f"incomplete string length indicator for inference input '{name}' for model '{model}', "
                f"expecting {_LENGTH.size} bytes but only {end - offset} bytes available"
            )
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += _LENGTH.size
        if end - offset < length:
            raise _invalid(
                f"incomplete string data for inference input '{name}' for model '{model}', expecting "
                f"string of length {length} but only {end - offset} bytes available"
            )
        offset += length
        count += 1
    if count != expected:
        raise _invalid(
            f"unexpected number of string elements {count} for inference input '{name}' for model "
            f"'{model}', expecting {expected}"
        )


def _check_typed(tensor: InputTensor, model: str) -> None:
    expected = element_count(tensor.shape)
    counts = tensor.typed_counts
    if counts is None or not counts:
        if expected == 0:
            return
        raise _invalid(
            f"unable to find data for input tensor '{tensor.name}' for model '{model}' in request."
        )
    datatype = DATATYPES[tensor.datatype]
    if datatype.contents_field is None:
        raise _invalid(
            f"{tensor.datatype} data for input '{tensor.name}' for model '{model}' must be sent in "
            "raw_input_contents (InferTensorContents has no field for it)"
        )
    if len(counts) > 1:
        raise _invalid(
            f"more than one contents field ({', '.join(sorted(counts))}) is set for input '{tensor.name}' "
            f"for model '{model}'"
        )
    ((field, count),) = counts.items()
    if field != datatype.contents_field:
        raise _invalid(
            f"unexpected explicit tensor data for input tensor '{tensor.name}' for model '{model}' of type "
            f"'{tensor.datatype}': expected {datatype.contents_field}, got {field}"
        )
    if count != expected:
        raise _invalid(
            f"unexpected number of elements for input '{tensor.name}' for model '{model}'. "
            f"Expected {expected}, got {count}"
        )


def check_against_model(request: KServeRequest, tensors: ModelTensors) -> None:
    model = request.model
    if tensors.inputs:
        _check_input_names(request, tensors)
        batch_sizes = {_check_input(tensor, tensors, model) for tensor in request.inputs}
        if len(batch_sizes) > 1:
            tensor = request.inputs[-1]
            raise _invalid(f"input '{tensor.name}' batch size does not match other inputs for '{model}'")
    _check_outputs(request.outputs, tensors, model)


def _check_input_names(request: KServeRequest, tensors: ModelTensors) -> None:
    given = [tensor.name for tensor in request.inputs]
    for name in given:
        if tensors.input(name) is None:
            raise _invalid(f"unexpected inference input '{name}' for model '{request.model}'")
    missing = [spec.name for spec in tensors.inputs if not spec.optional and spec.name not in given]
    if missing:
        required = sum(1 for spec in tensors.inputs if not spec.optional)
        raise _invalid(
            f"expected {required} inputs but got {len(given)} inputs for model '{request.model}'. Got "
            f"input(s) {given}, but missing required input(s) {missing}. Please provide all required "
            "input(s)."
        )


def _check_input(tensor: InputTensor, tensors: ModelTensors, model: str) -> int:
    """Datatype and shape against the declaration; returns the batch size (-1 without batching)."""
    spec = tensors.input(tensor.name)
    assert spec is not None
    if tensor.datatype != spec.datatype:
        raise _invalid(
            f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model '{model}' "
            f"expects '{spec.datatype}'"
        )
    shape = tensor.shape
    if tensors.max_batch_size > 0:
        if not shape:
            raise _invalid(
                f"input '{tensor.name}' has no shape but model requires batch dimension for '{model}'"
            )
        if shape[0] > tensors.max_batch_size:
            raise _invalid(f"inference request batch-size must be <= {tensors.max_batch_size} for '{model}'")
        _check_dims(tensor, spec, shape[1:], model, batching=True)
        return shape[0]
    _check_dims(tensor, spec, shape, model, batching=False)
    return -1


def _check_dims(
    tensor: InputTensor, spec: TensorSpec, dims: tuple[int, ...], model: str, *, batching: bool
) -> None:
    if len(dims) == len(spec.shape) and all(
        want in (-1, got) for want, got in zip(spec.shape, dims, strict=True)
    ):
        return
    expected = (-1, *spec.shape) if batching else spec.shape
    raise _invalid(
        f"unexpected shape for input '{tensor.name}' for model '{model}'. Expected {shape_text(expected)}, "
        f"got {shape_text(tensor.shape)}"
    )


def _check_outputs(outputs: tuple[RequestedOutput, ...], tensors: ModelTensors, model: str) -> None:
    names = [output.name for output in outputs]
    for output in outputs:
        if names.count(output.name) > 1:
            raise _invalid(f"output '{output.name}' is requested more than once for model '{model}'")
        if tensors.outputs and tensors.output(output.name) is None:
            raise _invalid(f"unexpected inference output '{output.name}' for model '{model}'")
        _check_output_parameters(output.name, output.parameters, model)


def _check_output_parameters(name: str, parameters: Mapping[str, object], model: str) -> None:
    if "classification" in parameters:
        raise _invalid(f"the classification extension is not supported (output '{name}' for model '{model}')")


def _invalid(message: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, message)
