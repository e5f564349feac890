"""The management calls' requests and answers, as every transport hands them to
:class:`sluice_manager.api.management.ManagementService` and reads them back, and the checks and
messages TorchServe's API gives them."""

from dataclasses import dataclass

from sluice.errors import ErrorCode, SluiceError

RUNTIMES = frozenset({"python", "python3", "LSP"})
# Placement gives every worker of a version one GPU of its host when it has any (model-config.yaml
# deviceType `cpu` opts out); a count of GPUs per scale call has nothing to map to.
NUMBER_GPU_REFUSED = (
    "number_gpu is not supported: each worker uses one GPU of its host when there is one "
    "(model-config.yaml deviceType: cpu keeps a model off GPUs); leave number_gpu out or send 0"
)


@dataclass(frozen=True)
class Status:
    """A status answer: gRPC ``msg``, REST ``{"status": message}`` with ``http_status``."""

    message: str
    http_status: int = 200


@dataclass(frozen=True)
class RegisterRequest:
    url: str
    model_name: str | None = None
    handler: str | None = None
    runtime: str | None = None
    batch_size: int | None = None
    max_batch_delay_ms: int | None = None
    initial_workers: int | None = None
    synchronous: bool = True
    response_timeout_s: int | None = None
    startup_timeout_s: int | None = None
    # See RegisterOptions.source_dir: the manager's own registrations only (a workflow's function nodes).
    source_dir: str | None = None


@dataclass(frozen=True)
class ScaleRequest:
    model_name: str
    # None: the default version (and the answer does not name a version).
    version: str | None
    min_workers: int
    max_workers: int
    synchronous: bool = False
    # TorchServe's `timeout`: seconds the workers this scale stops may take to drain before they are
    # killed (0: stopped at once); None (-1 or absent): the manager's worker_stop_timeout_s. Kept on the
    # version until the next ScaleWorker, so autoscaling and unregistering stop its workers alike.
    stop_timeout_s: int | None = None
    # TorchServe's `number_gpu` (which TorchServe 0.12 ignores): only 0 is accepted (see NUMBER_GPU_REFUSED).
    number_gpu: int = 0


def check_runtime(runtime: str | None) -> None:
    if runtime is None:
        return
    if runtime not in RUNTIMES:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid RuntimeType value: {runtime}")
    if runtime == "LSP":
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, "Runtime LSP is not supported by Sluice")


def invalid_timeout(timeout_s: int) -> str:
    return (
        f"Invalid timeout: {timeout_s}. Use -1 (the default stop timeout), 0 (stop workers at once) or the "
        "seconds workers may take to stop before they are killed"
    )


def scaled_message(model: str, version: str | None, workers: int) -> str:
    message = f"Workers scaled to {workers} for model: {model}"
    return message if version is None else f"{message}, version: {version}"


def registered_message(model: str, version: str, workers: int) -> str:
    return f'Model "{model}" Version: {version} registered with {workers} initial workers'
