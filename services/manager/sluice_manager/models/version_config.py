"""How a model version's settings are chosen: TorchServe's precedence rules, as a pure function.

torchserve.md section 5.3:
- ``batchSize`` / ``maxBatchDelay``: explicit (register) value > model-config.yaml > config.properties
  ``models`` JSON > built-in default (1 / 100 ms).
- ``responseTimeout`` / ``startupTimeout``: yaml (whenever set) > ``models`` JSON > explicit value >
  ``default_response_timeout`` / ``default_startup_timeout``.
- ``minWorkers`` / ``maxWorkers``: yaml when ``minWorkers > 0 and maxWorkers >= minWorkers`` (Sluice
  also takes ``minWorkers: 0`` with ``maxWorkers > 0``: the version scales from zero); else at
  startup the ``models`` JSON, then ``default_workers_per_model``, where Sluice reads 0 as **1** (not
  TorchServe's one per CPU core, which runs laptops out of memory); at register time the explicit
  ``initial_workers``, then ``default_workers_per_model`` (0 means no worker, as in TorchServe).
- ``jobQueueSize`` (> 0), ``maxRetryTimeoutInSec``, ``clientTimeoutInMills``, ``deviceType`` from the
  yaml only. Sluice reads extra yaml keys: ``batchPolicy`` (``fill`` or ``eager``), for worker
  containers ``containerCpus`` (cores, e.g. 1.5) and ``containerMemory`` (e.g. ``2g``), and for
  autoscaling between ``minWorkers`` and ``maxWorkers`` ``targetUtilization`` (0.8),
  ``targetJobsPerWorker`` (default: twice the batch size), ``scaleUpAfterMSec`` (2000),
  ``scaleDownAfterMSec`` (60000), ``scaleCooldownMSec`` (10000).
- Stateful models, from the yaml only: ``sequenceBatching`` (with ``sequenceMaxIdleMSec`` > 0, else
  the model is not stateful, as in TorchServe), ``sequenceTimeoutMSec``, ``maxSequenceJobQueueSize``
  and ``maxNumSequence`` (0 reads as 1, as in TorchServe), and Sluice's ``sequenceStateMaxBytes``.
- Generative models, from the yaml only: ``continuousBatching``, ``asyncCommunication`` and Sluice's
  ``maxConcurrentRequests`` (an async handler's cap per worker; default 8 x batchSize);
  ``parallelType`` is refused.
- Sluice's ``warmupRequests``: a file in the archive of requests each worker runs before READY
  (checked by the registration, :mod:`sluice.registry.warmup`).
"""

import json
from dataclasses import dataclass
from typing import Any

from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.declaration import ModelTensors, parse_model_tensors
from sluice.log import get_logger
from sluice.registry import names
from sluice.registry.records import BatchPolicy, VersionRecord

from sluice_manager.memory_sizes import parse_bytes
from sluice_manager.models.archives import printable
from sluice_manager.models.manifest import ArchiveContents

log = get_logger(__name__)

DEFAULT_BATCH_SIZE = 1
DEFAULT_MAX_BATCH_DELAY_MS = 100
DEFAULT_MAX_RETRY_TIMEOUT_S = 300
DEFAULT_TARGET_UTILIZATION = 0.8
DEFAULT_SCALE_UP_AFTER_MS = 2000
DEFAULT_SCALE_DOWN_AFTER_MS = 60000
DEFAULT_SCALE_COOLDOWN_MS = 10000
# Per model name, per version: TorchServe's `models` config key.
ModelsJson = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class RegisterOptions:
    """What the caller of a registration chose explicitly (RegisterModel parameters, load_models)."""

    url: str
    model_name: str | None = None
    handler: str | None = None
    runtime: str | None = None
    batch_size: int | None = None
    max_batch_delay_ms: int | None = None
    response_timeout_s: int | None = None
    startup_timeout_s: int | None = None
    initial_workers: int | None = None
    make_default: bool = False
    at_startup: bool = False
    # A folder the manager prepared inside its models folder (a workflow's function node), registered
    # instead of ``url``; never set from a client's request.
    source_dir: str | None = None


@dataclass(frozen=True)
class ServerDefaults:
    """The server-wide settings registration falls back on (from ManagerSettings)."""

    default_workers_per_model: int = 0
    job_queue_size: int = 100
    default_response_timeout_s: int = 120
    default_startup_timeout_s: int = 120
    service_envelope: str = ""
    default_service_handler: str = ""


def parse_models_json(text: str) -> ModelsJson:
    """TorchServe's ``models`` key; ValueError if it is not ``{name: {version: {key: value}}}``."""
    if not text.strip():
        return {}
    loaded = json.loads(text)
    if not isinstance(loaded, dict) or not all(
        isinstance(versions, dict) and all(isinstance(conf, dict) for conf in versions.values())
        for versions in loaded.values()
    ):
        raise ValueError("the `models` setting must be a JSON object {name: {version: {key: value}}}")
    return loaded


def default_model_name(url: str) -> str:
    """TorchServe's name for an archive without one: its file name without the extension."""
    base = url.rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".mar", ".tar.gz", ".tgz", ".model"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def build_record(
    options: RegisterOptions,
    contents: ArchiveContents,
    models_json: ModelsJson,
    defaults: ServerDefaults,
    *,
    model_dir: str,
    handler: str,
    now_unix_ms: int,
) -> VersionRecord:
    """The :class:`VersionRecord` of a registration (``handler`` already resolved and checked)."""
    manifest = contents.manifest
    name = options.model_name or manifest.model.model_name or default_model_name(options.url)
    version = manifest.version
    for label, value in (("model name", name), ("model version", version)):
        if not names.is_valid(value):
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid {label}: {printable(value)}")
    yaml_conf = _YamlConfig(contents.model_yaml)
    json_conf = models_json.get(name, {}).get(version, {})
    min_workers, max_workers = _workers(options, yaml_conf, json_conf, defaults)
    batch_size = (
        _first_positive(options.batch_size, yaml_conf.integer("batchSize"), _json_int(json_conf, "batchSize"))
        or DEFAULT_BATCH_SIZE
    )
    return VersionRecord(
        model_name=name,
        version=version,
        model_url=options.url,
        model_dir=model_dir,
        handler=handler,
        runtime=options.runtime or manifest.runtime,
        envelope=manifest.model.envelope or defaults.service_envelope,
        batch_size=batch_size,
        max_batch_delay_ms=_first_not_negative(
            options.max_batch_delay_ms,
            yaml_conf.integer("maxBatchDelay"),
            _json_int(json_conf, "maxBatchDelay"),
            DEFAULT_MAX_BATCH_DELAY_MS,
        ),
        batch_policy=yaml_conf.batch_policy(),
        response_timeout_s=_first_positive(
            yaml_conf.integer("responseTimeout"),
            _json_int(json_conf, "responseTimeout"),
            options.response_timeout_s,
            defaults.default_response_timeout_s,
        )
        or defaults.default_response_timeout_s,
        startup_timeout_s=_first_positive(
            yaml_conf.integer("startupTimeout"),
            _json_int(json_conf, "startupTimeout"),
            options.startup_timeout_s,
            defaults.default_startup_timeout_s,
        )
        or defaults.default_startup_timeout_s,
        min_workers=min_workers,
        max_workers=max_workers,
        target_jobs_per_worker=yaml_conf.positive_number("targetJobsPerWorker") or 2.0 * batch_size,
        target_utilization=yaml_conf.share("targetUtilization") or DEFAULT_TARGET_UTILIZATION,
        scale_up_after_ms=_first_not_negative(
            yaml_conf.integer("scaleUpAfterMSec"), DEFAULT_SCALE_UP_AFTER_MS
        ),
        scale_down_after_ms=_first_not_negative(
            yaml_conf.integer("scaleDownAfterMSec"), DEFAULT_SCALE_DOWN_AFTER_MS
        ),
        scale_cooldown_ms=_first_not_negative(
            yaml_conf.integer("scaleCooldownMSec"), DEFAULT_SCALE_COOLDOWN_MS
        ),
        job_queue_size=_first_positive(yaml_conf.integer("jobQueueSize"), defaults.job_queue_size)
        or defaults.job_queue_size,
        max_retry_timeout_s=_first_positive(yaml_conf.integer("maxRetryTimeoutInSec"))
        or DEFAULT_MAX_RETRY_TIMEOUT_S,
        client_timeout_ms=_first_not_negative(yaml_conf.integer("clientTimeoutInMills"), 0),
        device_type=yaml_conf.device_type(),
        container_cpus=yaml_conf.positive_number("containerCpus"),
        container_memory_bytes=yaml_conf.memory("containerMemory"),
        loaded_at_startup=options.at_startup,
        registered_unix_ms=now_unix_ms,
        model_yaml_config=contents.model_yaml,
        tensors=_tensors(contents.model_yaml),
        warmup_requests=yaml_conf.text("warmupRequests") or "",
        **_sequences(yaml_conf, name, version),
        **_generation(yaml_conf),
    )


def _workers(
    options: RegisterOptions, yaml_conf: "_YamlConfig", json_conf: dict[str, Any], defaults: ServerDefaults
) -> tuple[int, int]:
    yaml_min, yaml_max = yaml_conf.integer("minWorkers"), yaml_conf.integer("maxWorkers")
    # TorchServe's rule, plus minWorkers 0 with maxWorkers above it: a version that scales from zero.
    if yaml_min is not None and yaml_min >= 0 and yaml_max is not None and yaml_max >= max(yaml_min, 1):
        return yaml_min, yaml_max
    if options.at_startup:
        workers = defaults.default_workers_per_model or 1
        low = _first_not_negative(_json_int(json_conf, "minWorkers"), workers)
        high = _first_not_negative(_json_int(json_conf, "maxWorkers"), workers)
        return low, max(low, high)
    workers = _first_not_negative(options.initial_workers, defaults.default_workers_per_model)
    return workers, workers


def _sequences(yaml_conf: "_YamlConfig", model: str, version: str) -> dict[str, Any]:
    """The sequence keys of model-config.yaml, as VersionRecord fields (those not set keep theirs)."""
    batching = yaml_conf.flag("sequenceBatching")
    idle_ms = yaml_conf.non_negative("sequenceMaxIdleMSec") or 0
    if batching and not idle_ms:
        log.warning(
            "sequenceBatching without sequenceMaxIdleMSec > 0: the model is not stateful",
            model=model,
            version=version,
        )
    fields: dict[str, Any] = {
        "sequence_batching": batching,
        "sequence_max_idle_ms": idle_ms,
        "sequence_timeout_ms": yaml_conf.non_negative("sequenceTimeoutMSec") or 0,
        "max_sequence_job_queue_size": yaml_conf.non_negative("maxSequenceJobQueueSize") or 1,
        "max_num_sequence": yaml_conf.non_negative("maxNumSequence") or 1,
    }
    state_max_bytes = yaml_conf.non_negative("sequenceStateMaxBytes")
    if state_max_bytes is not None:
        fields["sequence_state_max_bytes"] = state_max_bytes
    return fields


def _generation(yaml_conf: "_YamlConfig") -> dict[str, Any]:
    """The generative-model keys (continuous batching, async handlers) as VersionRecord fields.
    Model parallelism (``parallelType``: TorchServe's torchrun-launched pipeline/tensor parallel
    workers) is refused: Sluice runs one process per worker, and serving such a model on one
    process would run it wrong without a word."""
    parallel = yaml_conf.text("parallelType")
    if parallel:
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT,
            f"model-config.yaml: parallelType {printable(parallel)!r} is not supported: Sluice runs each "
            "worker as one process (no torchrun model parallelism); remove parallelType to serve the "
            "model on one device",
        )
    continuous = yaml_conf.flag("continuousBatching")
    asynchronous = yaml_conf.flag("asyncCommunication")
    if asynchronous and (continuous or yaml_conf.flag("sequenceBatching")):
        raise SluiceError(
            ErrorCode.INVALID_ARGUMENT,
            "model-config.yaml: asyncCommunication cannot be combined with continuousBatching or "
            "sequenceBatching",
        )
    return {
        "continuous_batching": continuous,
        "async_communication": asynchronous,
        "max_concurrent_requests": yaml_conf.non_negative("maxConcurrentRequests") or 0,
    }


def _tensors(model_yaml: dict[str, Any]) -> ModelTensors:
    """The KServe v2 declaration (model-config.yaml ``sluice:``); a malformed one refuses the registration."""
    try:
        return parse_model_tensors(model_yaml)
    except ValueError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc


def _first_positive(*values: int | None) -> int | None:
    return next((value for value in values if value is not None and value > 0), None)


def _first_not_negative(*values: int | None) -> int:
    return next((value for value in values if value is not None and value >= 0), 0)


def _json_int(conf: dict[str, Any], key: str) -> int | None:
    value = conf.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"`models` setting: {key} must be an integer")
    return value


class _YamlConfig:
    """Typed reads of model-config.yaml keys; a key of the wrong type is a registration error."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def integer(self, key: str) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key} must be an integer")
        return value

    def non_negative(self, key: str) -> int | None:
        value = self.integer(key)
        if value is not None and value < 0:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key} must be a non-negative integer"
            )
        return value

    def flag(self, key: str) -> bool:
        value = self.raw.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key} must be true or false")
        return value

    def text(self, key: str) -> str | None:
        value = self.raw.get(key)
        return None if value is None else str(value)

    def device_type(self) -> str:
        value = (self.text("deviceType") or "").lower()
        if value not in ("", "cpu", "gpu"):
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, "model-config.yaml: deviceType must be cpu or gpu")
        return value

    def positive_number(self, key: str) -> float:
        value = self.raw.get(key)
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key} must be a positive number"
            )
        return float(value)

    def share(self, key: str) -> float:
        """A fraction above 0 and at most 1 (0.0 when the key is absent)."""
        value = self.positive_number(key)
        if value > 1:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key} must be above 0 and at most 1"
            )
        return value

    def memory(self, key: str) -> int:
        value = self.raw.get(key)
        if value is None:
            return 0
        try:
            size = (
                value if isinstance(value, int) and not isinstance(value, bool) else parse_bytes(str(value))
            )
        except ValueError as exc:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key}: {exc}") from None
        if size <= 0:
            raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"model-config.yaml: {key} must be positive")
        return size

    def batch_policy(self) -> BatchPolicy:
        value = self.text("batchPolicy")
        if value is None:
            return BatchPolicy.FILL
        try:
            return BatchPolicy(value)
        except ValueError:
            raise SluiceError(
                ErrorCode.INVALID_ARGUMENT, "model-config.yaml: batchPolicy must be fill or eager"
            ) from None
