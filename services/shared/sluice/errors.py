"""Domain errors: a code from a closed set plus a client-safe message, and what any other exception
becomes before a client sees it (:func:`as_sluice_error`). No transport imports here;
``sluice.transport.status_map`` turns codes into gRPC statuses and REST bodies, once, from a table, and
``sluice.transport.grpc_errors`` / ``sluice.transport.http_errors`` apply it to every rpc and route.
"""

import enum
import uuid
from dataclasses import dataclass

import structlog

from sluice.log import get_logger

log = get_logger(__name__)


class ErrorCode(enum.Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    VERSION_NOT_FOUND = "VERSION_NOT_FOUND"
    WORKFLOW_NOT_FOUND = "WORKFLOW_NOT_FOUND"
    # Anything else a call names that does not exist (a shared-memory region).
    NOT_FOUND = "NOT_FOUND"
    # Queue at `job_queue_size`, or no live worker: TorchServe answers both with one message.
    QUEUE_FULL = "QUEUE_FULL"
    NO_WORKER = "NO_WORKER"
    # A dependency (Redis) is unreachable, or the service is draining; nothing was accepted.
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    # A worker died or was killed while it held the job (TorchServe: "Worker died.").
    WORKER_DIED = "WORKER_DIED"
    # The handler (or the worker around it) failed; the HTTP status comes with the error.
    HANDLER_FAILED = "HANDLER_FAILED"
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    CONFLICT = "CONFLICT"
    # The call is valid but this server does not do it (e.g. unary ModelInfer on a decoupled model).
    NOT_IMPLEMENTED = "NOT_IMPLEMENTED"
    # Register/unregister while enable_model_api is off (TorchServe: REST 405, gRPC PERMISSION_DENIED).
    MODEL_API_DISABLED = "MODEL_API_DISABLED"
    # Another management operation holds the model (per-model lock): retry later.
    ABORTED = "ABORTED"
    # The call is valid but the model's state forbids it (removing the default version while
    # other versions exist: TorchServe's InvalidModelVersionException, REST 403).
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    INTERNAL = "INTERNAL"


# HTTP status TorchServe gives for each code (REST status, and the basis of its gRPC mapping).
HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.MODEL_NOT_FOUND: 404,
    ErrorCode.VERSION_NOT_FOUND: 404,
    ErrorCode.WORKFLOW_NOT_FOUND: 404,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.QUEUE_FULL: 503,
    ErrorCode.NO_WORKER: 503,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 408,
    ErrorCode.CANCELLED: 499,
    ErrorCode.WORKER_DIED: 500,
    ErrorCode.HANDLER_FAILED: 500,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.CONFLICT: 409,
    ErrorCode.NOT_IMPLEMENTED: 501,
    ErrorCode.MODEL_API_DISABLED: 405,
    ErrorCode.ABORTED: 409,
    ErrorCode.FAILED_PRECONDITION: 403,
    ErrorCode.INTERNAL: 500,
}

# TorchServe's exception class names: REST error bodies carry the simple name as "type", gRPC
# details end with the full name (clients sometimes parse it).
EXCEPTION_CLASS: dict[ErrorCode, str] = {
    ErrorCode.INVALID_ARGUMENT: "org.pytorch.serve.http.BadRequestException",
    ErrorCode.MODEL_NOT_FOUND: "org.pytorch.serve.archive.model.ModelNotFoundException",
    ErrorCode.VERSION_NOT_FOUND: "org.pytorch.serve.archive.model.ModelVersionNotFoundException",
    ErrorCode.WORKFLOW_NOT_FOUND: "org.pytorch.serve.archive.workflow.WorkflowNotFoundException",
    ErrorCode.NOT_FOUND: "org.pytorch.serve.http.ResourceNotFoundException",
    ErrorCode.QUEUE_FULL: "org.pytorch.serve.http.ServiceUnavailableException",
    ErrorCode.NO_WORKER: "org.pytorch.serve.http.ServiceUnavailableException",
    ErrorCode.UNAVAILABLE: "org.pytorch.serve.http.ServiceUnavailableException",
    ErrorCode.DEADLINE_EXCEEDED: "org.pytorch.serve.http.RequestTimeoutException",
    ErrorCode.CANCELLED: "org.pytorch.serve.http.InternalServerException",
    ErrorCode.WORKER_DIED: "org.pytorch.serve.http.InternalServerException",
    ErrorCode.HANDLER_FAILED: "org.pytorch.serve.http.InternalServerException",
    ErrorCode.MESSAGE_TOO_LARGE: "org.pytorch.serve.http.RequestEntityTooLargeException",
    ErrorCode.PERMISSION_DENIED: "org.pytorch.serve.http.InvalidKeyException",
    ErrorCode.CONFLICT: "org.pytorch.serve.http.ConflictStatusException",
    ErrorCode.NOT_IMPLEMENTED: "org.pytorch.serve.http.MethodNotAllowedException",
    # gRPC details name ModelException, as TorchServe's; REST bodies say MethodNotAllowedException
    # (sluice.transport.status_map.rest_error_type).
    ErrorCode.MODEL_API_DISABLED: "org.pytorch.serve.archive.model.ModelException",
    ErrorCode.ABORTED: "org.pytorch.serve.http.ConflictStatusException",
    ErrorCode.FAILED_PRECONDITION: "org.pytorch.serve.http.InvalidModelVersionException",
    ErrorCode.INTERNAL: "org.pytorch.serve.http.InternalServerException",
}


# What a client is told when the server fails unexpectedly (the traceback goes to the log only).
INTERNAL_MESSAGE = "Internal server error"


class SluiceError(Exception):
    """An error whose message is safe to show a client.

    ``http_status`` overrides the code's default status; handler errors use it to carry the status the
    handler chose (``PredictionException(msg, 404)``). ``exception_class`` overrides the code's Java
    exception where TorchServe names a more particular one (a workflow's ``InvalidDAGException``).
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        http_status: int | None = None,
        exception_class: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = http_status if http_status is not None else HTTP_STATUS[code]
        self._exception_class = exception_class

    @property
    def exception_class(self) -> str:
        return self._exception_class or EXCEPTION_CLASS[self.code]

    def __repr__(self) -> str:
        return f"SluiceError({self.code.value}, {self.message!r}, {self.http_status})"


def no_worker_message(model: str) -> str:
    """TorchServe's text for a full queue or a model without workers (clients match on it)."""
    return (
        f'Model "{model}" has no worker to serve inference request. Please use scale workers API to add '
        "workers. If this is a sequence inference, please check if it is closed, or expired; or exceeds "
        "maxSequenceJobQueueSize"
    )


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Exceptions that mean a dependency is unreachable (the manager's redis-py errors): the client is
    told UNAVAILABLE with ``message`` and the log gets a warning, not a traceback."""

    exceptions: tuple[type[BaseException], ...]
    message: str


def as_sluice_error(
    exc: Exception,
    unavailable: Unavailable | None = None,
    *,
    request_id: str | None = None,
    **log_fields: str,
) -> SluiceError:
    """``exc`` as a client-safe error. Anything but a :class:`SluiceError` (or an ``unavailable``
    exception) is a bug: INTERNAL with a generic message, logged with its traceback and the request id
    (``request_id``, else the one bound to the log context, else a new one). Call it from inside the
    ``except`` block that caught ``exc``."""
    if isinstance(exc, SluiceError):
        return exc
    if unavailable is not None and isinstance(exc, unavailable.exceptions):
        log.warning("dependency unavailable", error=str(exc), **log_fields)
        return SluiceError(ErrorCode.UNAVAILABLE, unavailable.message)
    if request_id is None:
        request_id = structlog.contextvars.get_contextvars().get("request_id") or uuid.uuid4().hex
    log.exception("unexpected error", request_id=request_id, **log_fields)
    return SluiceError(ErrorCode.INTERNAL, INTERNAL_MESSAGE)
