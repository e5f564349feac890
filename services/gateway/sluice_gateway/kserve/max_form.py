"""Requests in Modular MAX's form: MAX's KServe gRPC example client sends its prompt as typed contents
(``int_contents`` holding the characters' code points) without ``datatype`` or ``shape``, and reads the
answer from ``outputs[0].contents`` (MAX answers with typed contents, never raw ones).

An input that names neither a datatype nor a shape but fills exactly one ``InferTensorContents`` field
is read as a 1-D tensor of that field's type (:data:`IMPLIED_DATATYPES`, e.g. INT32 for ``int_contents``);
a request with such an input is answered with typed contents, as if it had set ``binary_data_output``
false, unless it sets that parameter itself. Clients that follow the v2 protocol always send both
(Triton refuses an input without them), so nothing changes for them. The request is completed here,
before validation, and the worker gets the completed request.
"""

import dataclasses

from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.request import BINARY_DATA_OUTPUT, InputTensor, KServeRequest, Parameter

# The datatype an input without one takes from the contents field it fills (the field's widest type
# that InferTensorContents holds losslessly).
IMPLIED_DATATYPES = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}


def _bare(tensor: InputTensor) -> bool:
    """No datatype, no shape, and exactly one contents field filled."""
    counts = tensor.typed_counts
    return not tensor.datatype and not tensor.shape and counts is not None and len(counts) == 1


def complete(request: KServeRequest, raw: bytes) -> tuple[KServeRequest, bytes]:
    """``request`` and its serialized form with each bare input typed and shaped, and typed answers
    asked for; unchanged (the same bytes) when no input is bare."""
    if not any(_bare(tensor) for tensor in request.inputs):
        return request, raw
    message = pb.ModelInferRequest.FromString(raw)
    inputs = []
    for tensor, sent in zip(request.inputs, message.inputs, strict=True):
        if _bare(tensor):
            assert tensor.typed_counts is not None
            ((field, count),) = tensor.typed_counts.items()
            tensor = dataclasses.replace(tensor, datatype=IMPLIED_DATATYPES[field], shape=(count,))
            sent.datatype = tensor.datatype
            sent.shape[:] = tensor.shape
        inputs.append(tensor)
    parameters = dict(request.parameters)
    if BINARY_DATA_OUTPUT not in parameters:
        parameters[BINARY_DATA_OUTPUT] = Parameter("bool", False)
        message.parameters[BINARY_DATA_OUTPUT].bool_param = False
    completed = dataclasses.replace(request, inputs=tuple(inputs), parameters=parameters)
    return completed, message.SerializeToString()
