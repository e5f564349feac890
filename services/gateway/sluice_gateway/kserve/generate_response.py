"""Triton's generate extension, response side: a worker-built ``ModelInferResponse`` as the generate
JSON object, and server-sent events for ``generate_stream``.

The object holds ``model_name``, ``model_version``, ``id`` (when the request had one), each response
parameter by its name, then each output by its name (as Triton's generate endpoint, no name overrides
one before it). An output's value is its flat data, a single element as a scalar: BYTES elements as
strings when UTF-8, else as ``{"b64": "<standard base64>"}`` (the worker's convention for bytes in
JSON); BOOL as true/false; numbers as numbers. ``generate_stream`` sends each object as one event,
``data: <JSON>`` and a blank line; an error after the first event is an event ``{"error": <message>}``.
"""

import base64
import json
from typing import Any

from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.rest_codec import parameter_value, parse_infer_response, raw_output
from sluice_gateway.kserve.rest_tensors import json_data, split_bytes

EVENT_STREAM = "text/event-stream; charset=utf-8"


def generate_document(raw: bytes) -> dict[str, Any]:
    """The generate response object for a worker's ModelInferResponse bytes."""
    response = parse_infer_response(raw)
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    for key, parameter in response.parameters.items():
        document.setdefault(key, parameter_value(parameter))
    for index, tensor in enumerate(response.outputs):
        document.setdefault(tensor.name, _value(tensor, raw_output(response, index)))
    return document


def _value(tensor: pb.ModelInferResponse.InferOutputTensor, raw: bytes) -> Any:
    data = _bytes_data(raw) if tensor.datatype == "BYTES" else json_data(tensor.datatype, raw)
    assert data is not None  # json_data answers None for BYTES only
    return data[0] if len(data) == 1 else data


def _bytes_data(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for item in split_bytes(raw):
        try:
            out.append(item.decode("utf-8"))
        except UnicodeDecodeError:
            out.append({"b64": base64.b64encode(item).decode("ascii")})
    return out


def json_body(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def sse_event(document: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``document``."""
    return b"data: " + json_body(document) + b"\n\n"
