"""Triton's generate extension, request side: a generate JSON object as the KServe v2
``ModelInferRequest`` the v2 transports forward (``KSERVE`` jobs: validation, the worker codec and the
reply path are shared with ``/infer``).

Rules, for a model that declares its inputs (``sluice:`` in model-config.yaml; Triton's rules):

- The body is one JSON object (an empty body is an empty object); a key may appear once.
- ``id`` (a string) is the request id, echoed in every response.
- ``parameters`` (an object) and every other top-level key: a key that names a declared input becomes
  that input; any other key becomes a request parameter (a string, boolean, integer or float; any
  other JSON value is refused). A declared input named ``parameters`` is refused.
- An input's value is a scalar or a flat list; its datatype is the declared one and its shape the
  declared one (behind a variable batch dimension when the model batches), filled Triton's way:
  every fixed dimension must divide the element count, the innermost variable dimension takes what
  is left and any other variable dimension is 1.

For a model that declares no inputs (Sluice's own rule: there is nothing to name inputs by):

- ``text_input`` (the extension's input) is an input, and so is any other top-level key whose value
  is a list (a parameter holds a scalar only).
- Any other top-level key with a scalar value (string, number, boolean), and every key of
  ``parameters``, is a request parameter. So ``{"text_input": "Hi", "max_tokens": 16}`` sends input
  ``text_input`` and parameter ``max_tokens``, as generate clients and v2 handlers expect; a scalar
  input other than ``text_input`` is sent as a one-element list.
- An input's datatype follows its JSON values: strings are BYTES (their UTF-8 bytes), booleans BOOL,
  integers INT64, floats FP64 (integers mixed with floats: FP64); the shape is ``[1]`` for a scalar,
  ``[n]`` for a flat list of n values of one kind. Empty, nested or mixed lists, null and objects are
  refused.

Every refusal is INVALID_ARGUMENT (HTTP 400), before anything is queued.
"""

import json
from collections.abc import Mapping
from typing import Any

from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors
from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.rest_codec import json_parameter
from sluice_gateway.kserve.rest_tensors import pack

ID = "id"
PARAMETERS = "parameters"
TEXT_INPUT = "text_input"
VARIABLE = -1


def _invalid(message: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, message)


def parse_generate_body(body: bytes) -> dict[str, Any]:
    """The request's JSON object (an empty body is an empty object, as in Triton)."""
    if not body.strip():
        return {}
    try:
        document = json.loads(body, object_pairs_hook=_unique_keys)
    except ValueError as exc:
        raise _invalid(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise _invalid("the generate request must be a JSON object")
    return document


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a key given twice is refused (Triton refuses an input given twice)."""
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _invalid(f"'{key}' is given twice in the request")
        document[key] = value
    return document


def to_infer_request(
    document: Mapping[str, Any], model: str, version: str, tensors: ModelTensors
) -> pb.ModelInferRequest:
    """The ModelInferRequest a generate request stands for, by the rules above."""
    request_id = document.get(ID, "")
    if not isinstance(request_id, str):
        raise _invalid(f"'{ID}' must be a string")
    message = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    if tensors.input(PARAMETERS) is not None:
        raise _invalid(f"Keyword '{PARAMETERS}' for nested schema also given as input tensor name")
    parameters = document.get(PARAMETERS) or {}
    if not isinstance(parameters, Mapping):
        raise _invalid(f"'{PARAMETERS}' must be a JSON object")
    declared = bool(tensors.inputs)
    for key, value in document.items():
        if key not in (ID, PARAMETERS):
            as_input = tensors.input(key) is not None if declared else _undeclared_input(key, value)
            _add(message, key, value, tensors, as_input=as_input)
    for key, value in parameters.items():
        _add(message, key, value, tensors, as_input=declared and tensors.input(key) is not None)
    return message


def _undeclared_input(key: str, value: Any) -> bool:
    """Whether a top-level key of a request to a model without declared inputs is an input."""
    return key == TEXT_INPUT or isinstance(value, list)


def _add(
    message: pb.ModelInferRequest, key: str, value: Any, tensors: ModelTensors, *, as_input: bool
) -> None:
    if not as_input:
        message.parameters[key].CopyFrom(json_parameter(key, value))
        return
    if isinstance(value, list) and any(isinstance(item, list | dict) for item in value):
        raise _invalid(f"input '{key}' must be a scalar or a flat list")
    elements = value if isinstance(value, list) else [value]
    spec = tensors.input(key)
    if spec is None:
        datatype, shape = _inferred_datatype(key, elements), [len(elements)]
    else:
        batch = (VARIABLE,) if tensors.max_batch_size > 0 else ()
        datatype, shape = spec.datatype, filled_shape(key, (*batch, *spec.shape), len(elements))
    message.inputs.add(name=key, datatype=datatype, shape=shape)
    message.raw_input_contents.append(pack(datatype, elements, key))


def filled_shape(name: str, declared: tuple[int, ...], count: int) -> list[int]:
    """``declared`` with its variable dimensions set so that it holds ``count`` elements (Triton's
    rule: fixed dimensions divide the count, the innermost variable one takes the rest, others 1)."""
    remaining = count
    for dim in declared:
        if dim != VARIABLE:
            if dim <= 0 or remaining % dim:
                raise _cannot_convert(name)
            remaining //= dim
    shape = list(declared)
    for index in reversed(range(len(shape))):
        if shape[index] == VARIABLE:
            shape[index], remaining = remaining, 1
    if remaining != 1:
        raise _cannot_convert(name)
    return shape


def _cannot_convert(name: str) -> SluiceError:
    return _invalid(f"The schema can not convert input '{name}' to tensor with proper shape")


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):  # before int: a bool is an int in Python
        return "BOOL"
    if isinstance(value, int):
        return "INT64"
    if isinstance(value, float):
        return "FP64"
    if isinstance(value, str):
        return "BYTES"
    return None


def _inferred_datatype(name: str, elements: list[Any]) -> str:
    """The datatype of an input the model does not declare, from its JSON values."""
    if not elements:
        raise _invalid(f"cannot infer the datatype of input '{name}' from an empty list")
    kinds = {_kind(item) for item in elements}
    if kinds == {"INT64", "FP64"}:
        return "FP64"
    if len(kinds) != 1 or None in kinds:
        raise _invalid(
            f"input '{name}' must be a string, a number, a boolean or a flat list of values of one of "
            "these kinds"
        )
    (kind,) = kinds
    assert kind is not None
    return kind
