"""What KServe v2 metadata rpcs say about a model version, built from its :class:`VersionRecord`.

Pure functions returning plain dataclasses; transports turn them into ModelMetadataResponse /
ModelConfigResponse (gRPC) or JSON. Shapes follow Triton: metadata shapes carry a leading -1 when the
model batches (``max_batch_size > 0``), config ``dims`` never carry the batch dimension.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from sluice.kserve.datatypes import DATATYPES
from sluice.kserve.declaration import TensorSpec
from sluice.registry.records import VersionRecord

SERVER_NAME = "sluice"
# The KServe/Triton extensions Sluice implements, exactly (ServerMetadata.extensions).
EXTENSIONS = ("model_configuration", "statistics", "parameters", "generate")
# ModelConfig.backend: handlers run through TorchServe's Python handler contract.
BACKEND = "torchserve"


@dataclass(frozen=True, slots=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


@dataclass(frozen=True, slots=True)
class ConfigTensor:
    name: str
    # model_config.proto DataType name (TYPE_FP32, TYPE_STRING for BYTES ...).
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False


@dataclass(frozen=True, slots=True)
class DynamicBatching:
    preferred_batch_size: int
    max_queue_delay_us: int
    max_queue_size: int


@dataclass(frozen=True, slots=True)
class SequenceBatching:
    """Triton's sequence batcher with the direct strategy (what a stateful version does)."""

    max_sequence_idle_us: int
    max_queue_delay_us: int


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    """One step of an ensemble (a workflow node): its member model and how its tensors map to the
    ensemble's."""

    model_name: str
    input_map: dict[str, str]
    output_map: dict[str, str]


@dataclass(frozen=True, slots=True)
class ModelConfigView:
    name: str
    platform: str
    backend: str
    runtime: str
    max_batch_size: int
    inputs: tuple[ConfigTensor, ...]
    outputs: tuple[ConfigTensor, ...]
    # None when the workers run one job per handler call, or the version is stateful.
    dynamic_batching: DynamicBatching | None
    # Set for a stateful version (sequenceBatching): Triton's scheduling_choice is one or the other.
    sequence_batching: SequenceBatching | None
    decoupled: bool
    instance_count: int
    instance_kind: str  # "KIND_CPU" or "KIND_GPU"
    parameters: dict[str, str]
    # An ensemble's steps (a workflow's nodes); empty for a model.
    ensemble_steps: tuple[EnsembleStep, ...] = ()


def model_metadata(record: VersionRecord, versions: Iterable[str]) -> ModelMetadata:
    tensors = record.tensors
    batch = (-1,) if tensors.max_batch_size > 0 else ()
    return ModelMetadata(
        name=record.model_name,
        versions=tuple(sorted(versions)),
        platform=tensors.platform or BACKEND,
        inputs=tuple(TensorMetadata(s.name, s.datatype, (*batch, *s.shape)) for s in tensors.inputs),
        outputs=tuple(TensorMetadata(s.name, s.datatype, (*batch, *s.shape)) for s in tensors.outputs),
    )


def model_config(record: VersionRecord) -> ModelConfigView:
    tensors = record.tensors
    batching, sequences = None, None
    delay_us = record.max_batch_delay_ms * 1000 if record.batch_size > 1 else 0
    if record.stateful:
        sequences = SequenceBatching(record.sequence_max_idle_ms * 1000, delay_us)
    elif record.batch_size > 1:
        batching = DynamicBatching(
            preferred_batch_size=record.batch_size,
            max_queue_delay_us=delay_us,
            max_queue_size=record.job_queue_size,
        )
    return ModelConfigView(
        name=record.model_name,
        platform=tensors.platform,
        backend=BACKEND,
        runtime=record.runtime,
        max_batch_size=tensors.max_batch_size,
        inputs=tuple(_config_tensor(spec) for spec in tensors.inputs),
        outputs=tuple(_config_tensor(spec) for spec in tensors.outputs),
        dynamic_batching=batching,
        sequence_batching=sequences,
        # A generative model (continuous batching, async handlers) answers a request with many responses.
        decoupled=tensors.decoupled or record.generative,
        instance_count=record.min_workers,
        instance_kind="KIND_GPU" if record.device_type == "gpu" else "KIND_CPU",
        parameters={
            "handler": record.handler,
            "batch_size": str(record.batch_size),
            "tensor_handler": "true" if tensors.tensor_handler else "false",
        },
    )


def _config_tensor(spec: TensorSpec) -> ConfigTensor:
    return ConfigTensor(spec.name, DATATYPES[spec.datatype].triton_type, spec.shape, spec.optional)
