"""KServe v2 gRPC messages <-> the transport-agnostic KServe service. Inference requests are parsed to
route and validate only (the original bytes go to the worker); responses of the metadata rpcs are
built here from the service's dataclasses."""

from collections.abc import Iterable, Mapping

from google.protobuf.message import DecodeError
from sluice.errors import ErrorCode, SluiceError
from sluice.kserve.datatypes import CONTENTS_FIELDS
from sluice.v1 import kserve_pb2 as pb

from sluice_gateway.kserve.metadata import ModelConfigView, ModelMetadata, TensorMetadata
from sluice_gateway.kserve.request import (
    InputTensor,
    KServeRequest,
    Parameter,
    ParameterKind,
    RequestedOutput,
    shared_memory_ref,
)
from sluice_gateway.kserve.service import IndexEntry, ServerMetadata, StatsEntry
from sluice_gateway.kserve.stats import Duration

INVALID_REQUEST = "Invalid ModelInferRequest."

_PARAMETER_KINDS: dict[str, ParameterKind] = {
    "bool_param": "bool",
    "int64_param": "int64",
    "string_param": "string",
    "double_param": "double",
    "uint64_param": "uint64",
}


def parse_infer_request(raw: bytes) -> KServeRequest:
    message = pb.ModelInferRequest()
    try:
        message.ParseFromString(raw)
    except DecodeError as exc:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, INVALID_REQUEST) from exc
    return to_kserve_request(message)


def to_kserve_request(message: pb.ModelInferRequest) -> KServeRequest:
    return KServeRequest(
        model=message.model_name,
        version=message.model_version,
        request_id=message.id,
        inputs=tuple(_input(tensor) for tensor in message.inputs),
        raw_input_contents=tuple(message.raw_input_contents),
        outputs=tuple(_output(output) for output in message.outputs),
        parameters=parameters(message.parameters),
    )


def _input(tensor: pb.ModelInferRequest.InferInputTensor) -> InputTensor:
    counts: dict[str, int] | None = None
    if tensor.HasField("contents"):
        lengths = ((name, len(getattr(tensor.contents, name))) for name in CONTENTS_FIELDS)
        counts = {name: count for name, count in lengths if count}
    region = (
        shared_memory_ref(tensor.name, parameters(tensor.parameters), "input") if tensor.parameters else None
    )
    return InputTensor(tensor.name, tensor.datatype, tuple(tensor.shape), counts, region)


def _output(output: pb.ModelInferRequest.InferRequestedOutputTensor) -> RequestedOutput:
    given = parameters(output.parameters)
    return RequestedOutput(output.name, given, shared_memory_ref(output.name, given, "output"))


def parameters(values: Mapping[str, pb.InferParameter]) -> dict[str, Parameter]:
    out = {}
    for key, value in values.items():
        choice = value.WhichOneof("parameter_choice")
        out[key] = (
            Parameter(None) if choice is None else Parameter(_PARAMETER_KINDS[choice], getattr(value, choice))
        )
    return out


def server_metadata(info: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(name=info.name, version=info.version, extensions=info.extensions)


def model_metadata(info: ModelMetadata) -> pb.ModelMetadataResponse:
    return pb.ModelMetadataResponse(
        name=info.name,
        versions=info.versions,
        platform=info.platform,
        inputs=_tensor_metadata(info.inputs),
        outputs=_tensor_metadata(info.outputs),
    )


def _tensor_metadata(
    tensors: Iterable[TensorMetadata],
) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    return [
        pb.ModelMetadataResponse.TensorMetadata(name=t.name, datatype=t.datatype, shape=t.shape)
        for t in tensors
    ]


def model_config(view: ModelConfigView) -> pb.ModelConfigResponse:
    config = pb.ModelConfig(
        name=view.name,
        platform=view.platform,
        backend=view.backend,
        runtime=view.runtime,
        max_batch_size=view.max_batch_size,
        input=[
            pb.ModelInput(
                name=t.name, data_type=pb.DataType.Value(t.data_type), dims=t.dims, optional=t.optional
            )
            for t in view.inputs
        ],
        output=[
            pb.ModelOutput(name=t.name, data_type=pb.DataType.Value(t.data_type), dims=t.dims)
            for t in view.outputs
        ],
        instance_group=[
            pb.ModelInstanceGroup(
                name=view.name,
                count=view.instance_count,
                kind=pb.ModelInstanceGroup.Kind.Value(view.instance_kind),
            )
        ],
        model_transaction_policy=pb.ModelTransactionPolicy(decoupled=view.decoupled),
        parameters={key: pb.ModelParameter(string_value=value) for key, value in view.parameters.items()},
    )
    if view.dynamic_batching is not None:
        batching = view.dynamic_batching
        config.dynamic_batching.CopyFrom(
            pb.ModelDynamicBatching(
                preferred_batch_size=[batching.preferred_batch_size],
                max_queue_delay_microseconds=batching.max_queue_delay_us,
                default_queue_policy=pb.ModelQueuePolicy(max_queue_size=batching.max_queue_size),
            )
        )
    if view.ensemble_steps:
        config.ensemble_scheduling.CopyFrom(
            pb.ModelEnsembling(
                step=[
                    pb.ModelEnsembling.Step(
                        model_name=step.model_name,
                        model_version=-1,
                        input_map=step.input_map,
                        output_map=step.output_map,
                    )
                    for step in view.ensemble_steps
                ]
            )
        )
    if view.sequence_batching is not None:
        sequences = view.sequence_batching
        config.sequence_batching.CopyFrom(
            pb.ModelSequenceBatching(
                max_sequence_idle_microseconds=sequences.max_sequence_idle_us,
                direct=pb.ModelSequenceBatching.StrategyDirect(
                    max_queue_delay_microseconds=sequences.max_queue_delay_us
                ),
            )
        )
    return pb.ModelConfigResponse(config=config)


def statistics(entries: Iterable[StatsEntry]) -> pb.ModelStatisticsResponse:
    return pb.ModelStatisticsResponse(
        model_stats=[
            pb.ModelStatistics(
                name=entry.model,
                version=entry.version,
                last_inference=entry.stats.last_inference_ms,
                inference_count=entry.stats.inference_count,
                execution_count=entry.stats.execution_count,
                inference_stats=pb.InferStatistics(
                    success=_duration(entry.stats.success),
                    fail=_duration(entry.stats.fail),
                    queue=_duration(entry.stats.queue),
                    compute_infer=_duration(entry.stats.compute_infer),
                ),
            )
            for entry in entries
        ]
    )


def _duration(duration: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=duration.count, ns=duration.ns)


def repository_index(entries: Iterable[IndexEntry]) -> pb.RepositoryIndexResponse:
    return pb.RepositoryIndexResponse(
        models=[
            pb.RepositoryIndexResponse.ModelIndex(
                name=e.model, version=e.version, state=e.state, reason=e.reason
            )
            for e in entries
        ]
    )


def stream_error(message: str, request_id: str) -> bytes:
    """An in-stream error: ``error_message`` set, ``infer_response.id`` naming the failed request."""
    return pb.ModelStreamInferResponse(
        error_message=message, infer_response=pb.ModelInferResponse(id=request_id)
    ).SerializeToString()
