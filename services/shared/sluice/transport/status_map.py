"""Errors to gRPC statuses and REST statuses, in one table (used by the interceptors and middlewares
of the gateway and the manager).

Handler errors follow TorchServe's HTTP -> gRPC mapping (``GRPCUtils.getGRPCStatusCode``). Our own
codes map to the standard gRPC meaning; where TorchServe differs (it answers an unknown model with
INTERNAL), the README's compatibility table says so.
"""

import grpc

from sluice.errors import ErrorCode, SluiceError

_BY_CODE: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.MODEL_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.VERSION_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.WORKFLOW_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.QUEUE_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.NO_WORKER: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorCode.WORKER_DIED: grpc.StatusCode.INTERNAL,
    ErrorCode.MESSAGE_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.CONFLICT: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.NOT_IMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.MODEL_API_DISABLED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.ABORTED: grpc.StatusCode.ABORTED,
    ErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}

_BY_HTTP: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    416: grpc.StatusCode.OUT_OF_RANGE,
    499: grpc.StatusCode.CANCELLED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def grpc_status_for_http(http_status: int) -> grpc.StatusCode:
    """TorchServe's HTTP -> gRPC table: 2xx OK, listed codes, other 4xx FAILED_PRECONDITION,
    other 5xx INTERNAL, anything else UNKNOWN."""
    if 200 <= http_status < 300:
        return grpc.StatusCode.OK
    if http_status in _BY_HTTP:
        return _BY_HTTP[http_status]
    if 400 <= http_status < 500:
        return grpc.StatusCode.FAILED_PRECONDITION
    if 500 <= http_status < 600:
        return grpc.StatusCode.INTERNAL
    return grpc.StatusCode.UNKNOWN


def grpc_status(error: SluiceError) -> grpc.StatusCode:
    if error.code is ErrorCode.HANDLER_FAILED:
        return grpc_status_for_http(error.http_status)
    return _BY_CODE[error.code]


def grpc_details(error: SluiceError) -> str:
    """TorchServe's details format: the message, a newline, the Java exception class."""
    return f"{error.message}\n{error.exception_class}"


def rest_status(error: SluiceError) -> int:
    """The HTTP status of a REST error. A job failure carrying 413 becomes 507, as TorchServe's
    ``RestJob.sendError`` remaps it."""
    if error.code in (ErrorCode.HANDLER_FAILED, ErrorCode.WORKER_DIED) and error.http_status == 413:
        return 507
    return error.http_status


# REST error types that differ from the gRPC details' exception class.
_REST_TYPE: dict[ErrorCode, str] = {ErrorCode.MODEL_API_DISABLED: "MethodNotAllowedException"}


def rest_error_type(error: SluiceError) -> str:
    """The ``type`` of a TorchServe REST error body: the Java exception's simple name."""
    return _REST_TYPE.get(error.code) or error.exception_class.rsplit(".", 1)[-1]
