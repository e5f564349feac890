"""KServe v2 jobs (``WireProtocol.KSERVE``): handler rows from a ModelInferRequest, and the
ModelInferResponse built from a row's result.

Two handler modes (model-config.yaml ``sluice.tensor_handler``):

- default, as TorchServe's OIP: the row is ``{"body": {"id", "model_name", "model_version", "inputs":
  [{"name", "shape", "datatype", "data"}], "parameters"?, "outputs"?}}`` (flat ``data`` lists, content
  type application/json; a BYTES element is a str when it is UTF-8, else ``{"b64": base64}``); the
  handler returns v2 JSON ``{"outputs": [{"name", "datatype", "shape", "data"}]}`` per row, BYTES
  elements in the same two forms (see :mod:`.kserve_codec`), so returning an input unchanged echoes it.
- tensor mode: the row is ``{input name: numpy array | torch tensor}``; the handler returns ``{output
  name: array | tensor}`` per row, packed by :func:`tensor_entry_point` before TorchServe serializes it
  (no JSON round trip).

Either way the reply is a ModelInferResponse with ``raw_output_contents`` (typed contents when the
request set ``binary_data_output`` false), only the requested outputs, and id / model_name /
model_version filled in. Every job is one row: the batch dimension of a request stays in its arrays.
"""

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import DecodeError
from sluice.envelope import Job
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve import shared_memory
from sluice.kserve.declaration import ModelTensors
from sluice.kserve.shared_memory import SharedMemoryError, read_span, write_span
from sluice.v1 import kserve_pb2 as pb

from sluice_worker.protocols import kserve_codec
from sluice_worker.protocols.base import TsParameter
from sluice_worker.protocols.kserve_codec import CodecError, WireTensor

BODY = "body"
JSON_CONTENT_TYPE = "application/json"
TENSOR_CONTENT_TYPE = "application/x-sluice-tensor"
# Per-row header marking a tensor-mode row (its result is packed by tensor_entry_point).
TENSOR_ROW_HEADER = "sluice_v2_tensor_row"
# Per-row header with the request-level parameters as JSON (tensor mode; body rows carry them inline).
PARAMETERS_HEADER = "sluice_v2_parameters"
BINARY_DATA_OUTPUT = "binary_data_output"


def parse_request(request: bytes | memoryview) -> pb.ModelInferRequest:
    try:
        return pb.ModelInferRequest.FromString(bytes(request))
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Invalid ModelInferRequest.") from exc


def _parameters(values: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    return {key: kserve_codec.parameter_value(value) for key, value in values.items()}


class KServe:
    """Rows and replies of KServe v2 jobs, for one model version's declaration."""

    def __init__(self, tensors: ModelTensors) -> None:
        self._tensors = tensors

    # Rows -----------------------------------------------------------------------------------------
    def row(self, job: Job, request: bytes | memoryview) -> tuple[list[TsParameter], dict[str, str]]:
        """The job's row as TorchServe request parameters (name, contentType, value), and its extra
        per-row headers."""
        parsed = parse_request(request)
        return self._parameters(job, parsed), self._headers(parsed)

    def _parameters(self, job: Job, request: pb.ModelInferRequest) -> list[TsParameter]:
        try:
            shared = {
                span.tensor: read_span(span.key, span.offset, span.byte_size) for span in job.shm_inputs
            }
        except SharedMemoryError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
        try:
            arrays = kserve_codec.input_arrays(request, shared)
        except (CodecError, ValueError) as exc:  # the gateway validated; a bad job is still no crash
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid tensor data: {exc}") from exc
        if self._tensors.tensor_handler:
            torch_tensors = self._tensors.tensor_library == "torch"
            return [
                {
                    "name": tensor.name,
                    "contentType": TENSOR_CONTENT_TYPE,
                    "value": kserve_codec.to_torch(array, tensor.datatype) if torch_tensors else array,
                }
                for tensor, array in arrays
            ]
        body: dict[str, Any] = {
            "id": request.id,
            "model_name": job.model_name,
            "model_version": job.model_version,
            "inputs": [kserve_codec.json_input(tensor, array) for tensor, array in arrays],
        }
        if request.parameters:
            body["parameters"] = _parameters(request.parameters)
        if request.outputs:
            body["outputs"] = [{"name": output.name} for output in request.outputs]
        return [{"name": BODY, "contentType": JSON_CONTENT_TYPE, "value": body}]

    def _headers(self, request: pb.ModelInferRequest) -> dict[str, str]:
        if not self._tensors.tensor_handler:
            return {}
        headers = {TENSOR_ROW_HEADER: "true"}
        if request.parameters:
            headers[PARAMETERS_HEADER] = json.dumps(_parameters(request.parameters))
        return headers

    # Replies --------------------------------------------------------------------------------------
    def payload(self, job: Job, body: bytes) -> bytes:
        """The serialized ModelInferResponse for one result body of ``job``."""
        request = parse_request(job.request)
        try:
            tensors = self._declared_types(self._result_tensors(body))
            selected = self._requested(tensors, request, job.model_name)
            typed = (
                BINARY_DATA_OUTPUT in request.parameters
                and not request.parameters[BINARY_DATA_OUTPUT].bool_param
            )
            response = kserve_codec.response(
                selected, typed=typed, shared=_write_shared(job, selected, request)
            )
        except CodecError as exc:
            raise SluiceError(
                ErrorCode.HANDLER_FAILED, f"Invalid v2 inference result: {exc}", http_status=500
            ) from exc
        response.id = request.id
        response.model_name = job.model_name
        response.model_version = job.model_version
        return response.SerializeToString()

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        """The chunks' outputs joined (kserve_codec.join_chunks), packed as one tensor-set body."""
        try:
            chunks = [self._declared_types(self._result_tensors(body)) for body in bodies]
            return kserve_codec.TENSOR_SET_MAGIC + kserve_codec.pack(kserve_codec.join_chunks(chunks))
        except CodecError as exc:
            raise SluiceError(
                ErrorCode.HANDLER_FAILED, f"Invalid v2 inference result: {exc}", http_status=500
            ) from exc

    def _result_tensors(self, body: bytes) -> list[WireTensor]:
        if body.startswith(kserve_codec.TENSOR_SET_MAGIC):
            return kserve_codec.unpack(body[len(kserve_codec.TENSOR_SET_MAGIC) :])
        if not body.strip():
            return []
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise CodecError('expected v2 JSON {"outputs": [...]} or tensors') from exc
        if document is None:
            return []
        outputs = document.get("outputs") if isinstance(document, dict) else None
        if not isinstance(outputs, list) or not all(isinstance(item, dict) for item in outputs):
            raise CodecError('expected v2 JSON {"outputs": [{"name", "datatype", "shape", "data"}]}')
        return [
            kserve_codec.from_json_output(item, self._declared_type(item.get("name"))) for item in outputs
        ]

    def _declared_type(self, name: Any) -> str | None:
        spec = self._tensors.output(name) if isinstance(name, str) else None
        return None if spec is None else spec.datatype

    def _declared_types(self, tensors: list[WireTensor]) -> list[WireTensor]:
        out = []
        for tensor in tensors:
            declared = self._declared_type(tensor.name)
            out.append(tensor if declared is None else kserve_codec.cast(tensor, declared))
        return out

    def _requested(
        self, tensors: list[WireTensor], request: pb.ModelInferRequest, model: str
    ) -> list[WireTensor]:
        if not request.outputs:
            return tensors
        by_name = {tensor.name: tensor for tensor in tensors}
        selected = []
        for output in request.outputs:
            tensor = by_name.get(output.name)
            if tensor is None:
                if self._tensors.output(output.name) is not None:
                    raise CodecError(f"the handler returned no output '{output.name}'")
                raise SluiceError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"unexpected inference output '{output.name}' for model '{model}'",
                )
            selected.append(tensor)
        return selected

    # Tensor mode --------------------------------------------------------------------------------
    def tensor_entry_point(self, entry_point: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """Wrap a loaded handler so that a tensor-mode row's ``{name: array}`` result is packed into
        bytes before TorchServe serializes it (it would refuse arrays)."""
        declared = {spec.name: spec.datatype for spec in self._tensors.outputs}

        @functools.wraps(entry_point)
        def handle(data: Any, context: Any) -> Any:
            result = entry_point(data, context)
            if data is None or not isinstance(result, list):
                return result
            return [
                kserve_codec.tensor_result(row, declared)
                if isinstance(row, Mapping) and context.get_request_header(index, TENSOR_ROW_HEADER) == "true"
                else row
                for index, row in enumerate(result)
            ]

        return handle


def _write_shared(
    job: Job, tensors: list[WireTensor], request: pb.ModelInferRequest
) -> dict[str, Mapping[str, pb.InferParameter]]:
    """Write the outputs bound to shared memory into their spans; returns the parameters that named
    each one's region, by output name (the response carries them instead of the data)."""
    if not job.shm_outputs:
        return {}
    spans = {span.tensor: span for span in job.shm_outputs}
    asked: dict[str, Mapping[str, pb.InferParameter]] = {o.name: o.parameters for o in request.outputs}
    written: dict[str, Mapping[str, pb.InferParameter]] = {}
    for tensor in tensors:
        span = spans.get(tensor.name)
        if span is None:
            continue
        if len(tensor.raw) > span.byte_size:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT,
                f"shared memory size specified with the request for output '{tensor.name}' "
                f"({span.byte_size} bytes) should be at least {len(tensor.raw)} bytes to hold the results",
            )
        try:
            write_span(span.key, span.offset, span.byte_size, tensor.raw)
        except SharedMemoryError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
        given: Mapping[str, pb.InferParameter] = asked.get(tensor.name, {})
        written[tensor.name] = {key: given[key] for key in shared_memory.PARAMETERS if key in given}
    return written
