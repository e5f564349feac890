"""KServe v2 REST bodies <-> the messages of the v2 service (the same ``ModelInferRequest`` the gRPC
transport forwards, so validation, the worker codec and the reply path are shared).

Requests: a JSON object, optionally followed by binary tensor data (the binary tensor data extension:
``Inference-Header-Content-Length`` gives the JSON length; inputs with ``parameters.binary_data_size``
take their bytes from what follows, in order). Every input is forwarded in raw form.

Responses: JSON ``data`` lists, or binary data for outputs that asked for it (``binary_data`` on a
requested output, or ``binary_data_output`` on the request), appended after the JSON. A BYTES output
holding an element that is not UTF-8 is answered as binary data even when JSON was asked for: JSON
strings cannot carry it, and clients of the binary extension (tritonclient) read either form.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve import shared_memory
from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.rest_tensors import frame, json_data, pack

HEADER_LENGTH = "Inference-Header-Content-Length"
BINARY_DATA_SIZE = "binary_data_size"
BINARY_DATA = "binary_data"
BINARY_DATA_OUTPUT = "binary_data_output"
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RestInferRequest:
    message: pb.ModelInferRequest
    # Output names answered in binary form; every output when binary_all.
    binary_outputs: frozenset[str]
    binary_all: bool


def _invalid(message: str) -> SluiceError:
    return SluiceError(ErrorCode.INVALID_ARGUMENT, message)


def json_parameter(key: str, value: Any) -> pb.InferParameter:
    """A JSON parameter value as an InferParameter; INVALID_ARGUMENT unless a bool, number or string."""
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        if value > INT64_MAX:
            return pb.InferParameter(uint64_param=value)
        return pb.InferParameter(int64_param=value)
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    if isinstance(value, str):
        return pb.InferParameter(string_param=value)
    raise _invalid(f"parameter '{key}' must be a boolean, a number or a string")


def _parameters(target: Any, values: Any, *, skip: tuple[str, ...] = ()) -> None:
    if values is None:
        return
    if not isinstance(values, Mapping):
        raise _invalid("'parameters' must be a JSON object")
    for key, value in values.items():
        if key not in skip:
            target[key].CopyFrom(json_parameter(key, value))


def _split(body: bytes, header_length: str | None) -> tuple[Any, bytes]:
    json_part, binary = body, b""
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError:
            raise _invalid(f"{HEADER_LENGTH} must be an integer") from None
        if not 0 <= length <= len(body):
            raise _invalid(f"{HEADER_LENGTH} {length} does not fit a body of {len(body)} bytes")
        json_part, binary = body[:length], body[length:]
    try:
        document = json.loads(json_part)
    except ValueError as exc:
        raise _invalid(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise _invalid("the request must be a JSON object")
    return document, binary


def _input(
    item: Any, binary: memoryview, offset: int
) -> tuple[pb.ModelInferRequest.InferInputTensor, bytes | None, int]:
    """The input, its raw bytes (None for an input in shared memory) and where the next binary data starts."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise _invalid("every input needs a 'name'")
    name, datatype, shape = item["name"], item.get("datatype"), item.get("shape")
    if (
        not isinstance(datatype, str)
        or not isinstance(shape, list)
        or not all(isinstance(dim, int) and not isinstance(dim, bool) for dim in shape)
    ):
        raise _invalid(f"input '{name}' needs a 'datatype' string and a 'shape' list of integers")
    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    parameters = item.get("parameters") or {}
    _parameters(tensor.parameters, parameters, skip=(BINARY_DATA_SIZE,))
    if isinstance(parameters, Mapping) and shared_memory.REGION in parameters:
        if "data" in item or BINARY_DATA_SIZE in parameters:
            raise _invalid(f"input '{name}' is in shared memory: it takes no 'data' and no binary data")
        return tensor, None, offset
    size = parameters.get(BINARY_DATA_SIZE) if isinstance(parameters, Mapping) else None
    if size is not None:
        if not isinstance(size, int) or size < 0 or offset + size > len(binary):
            raise _invalid(f"input '{name}': binary_data_size {size} exceeds the binary data sent")
        return tensor, bytes(binary[offset : offset + size]), offset + size
    if "data" not in item:
        raise _invalid(f"input '{name}' has neither 'data' nor binary data")
    return tensor, pack(datatype, item["data"], name), offset


def region_body(body: bytes) -> tuple[str, int, int]:
    """A system shared-memory register body, ``{"key", "offset"?, "byte_size"}``: (key, offset, size)."""
    try:
        document = json.loads(body or b"{}")
    except ValueError as exc:
        raise _invalid(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("key"), str):
        raise _invalid("a shared memory region needs a 'key' string")
    counts = [document.get("offset", 0), document.get("byte_size")]
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= INT64_MAX for n in counts):
        raise _invalid("a shared memory region needs 'byte_size' (and 'offset', if given) as integers >= 0")
    return document["key"], counts[0], counts[1]


def parse_infer_request(body: bytes, header_length: str | None, model: str, version: str) -> RestInferRequest:
    document, binary = _split(body, header_length)
    inputs = document.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise _invalid("the request needs a non-empty 'inputs' list")
    request_id = document.get("id", "")
    message = pb.ModelInferRequest(
        model_name=model, model_version=version, id=request_id if isinstance(request_id, str) else ""
    )
    parameters = document.get("parameters") or {}
    _parameters(message.parameters, parameters, skip=(BINARY_DATA_OUTPUT,))
    view, offset = memoryview(binary), 0
    for item in inputs:
        tensor, raw, offset = _input(item, view, offset)
        message.inputs.append(tensor)
        if raw is not None:
            message.raw_input_contents.append(raw)
    binary_outputs = set()
    for item in document.get("outputs") or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise _invalid("every requested output needs a 'name'")
        output = message.outputs.add(name=item["name"])
        output_parameters = item.get("parameters") or {}
        _parameters(output.parameters, output_parameters, skip=(BINARY_DATA,))
        if isinstance(output_parameters, Mapping) and output_parameters.get(BINARY_DATA) is True:
            binary_outputs.add(item["name"])
    binary_all = isinstance(parameters, Mapping) and parameters.get(BINARY_DATA_OUTPUT) is True
    return RestInferRequest(message, frozenset(binary_outputs), binary_all)


def parameter_value(parameter: pb.InferParameter) -> Any:
    """An InferParameter's value as JSON holds it (None when unset)."""
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


def raw_output(response: pb.ModelInferResponse, index: int) -> bytes:
    """Output ``index`` in raw form (the worker answers raw unless a request asks for typed contents)."""
    if index < len(response.raw_output_contents):
        return bytes(response.raw_output_contents[index])
    tensor = response.outputs[index]
    for _field, values in tensor.contents.ListFields():
        if tensor.datatype == "BYTES":
            return frame(values)
        return pack(tensor.datatype, list(values), tensor.name)
    return b""


def parse_infer_response(raw: bytes) -> pb.ModelInferResponse:
    """A worker-built ModelInferResponse; INTERNAL when it does not parse."""
    response = pb.ModelInferResponse()
    try:
        response.ParseFromString(raw)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INTERNAL, "the model answered an invalid response") from exc
    return response


def infer_response_body(raw: bytes, request: RestInferRequest) -> tuple[bytes, int | None]:
    """The REST body for a worker-built ModelInferResponse, and the JSON length when binary data follows."""
    response = parse_infer_response(raw)
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    if response.parameters:
        document["parameters"] = {k: parameter_value(v) for k, v in response.parameters.items()}
    outputs, blobs = [], []
    for index, tensor in enumerate(response.outputs):
        output: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        parameters = {k: parameter_value(v) for k, v in tensor.parameters.items()}
        if shared_memory.REGION in parameters:  # written into the client's region
            output["parameters"] = parameters
            outputs.append(output)
            continue
        raw = raw_output(response, index)
        binary = request.binary_all or tensor.name in request.binary_outputs
        data = None if binary else json_data(tensor.datatype, raw)
        if data is None:
            parameters[BINARY_DATA_SIZE] = len(raw)
            blobs.append(raw)
        else:
            output["data"] = data
        if parameters:
            output["parameters"] = parameters
        outputs.append(output)
    document["outputs"] = outputs
    header = json.dumps(document, separators=(",", ":")).encode("utf-8")
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)


def message_json(message: Message) -> dict[str, Any]:
    """A protobuf response (model config, statistics) in the JSON form Triton's HTTP API uses."""
    return MessageToDict(message, preserving_proto_field_name=True)
