"""ModelMetadata / ModelConfig / ServerMetadata / statistics builders (checklist items 8, 9, 49, 50)."""

import dataclasses

from sluice.kserve.declaration import ModelTensors, TensorSpec
from sluice.v1 import kserve_pb2 as pb
from sluice_gateway.kserve import grpc_codec
from sluice_gateway.kserve.metadata import EXTENSIONS, model_config, model_metadata
from sluice_gateway.kserve.readiness import startup_complete, version_ready
from sluice_gateway.kserve.service import IndexEntry, ServerMetadata, StatsEntry
from sluice_gateway.kserve.stats import Duration, InferenceStats, Outcome

from tests.unit.gateway.fakes import record

TENSORS = ModelTensors(
    max_batch_size=8,
    inputs=(
        TensorSpec(name="INPUT0", datatype="FP32", shape=(16,)),
        TensorSpec(name="TEXT", datatype="BYTES", shape=(-1,), optional=True),
    ),
    outputs=(TensorSpec(name="OUTPUT0", datatype="BF16", shape=(-1, 4)),),
    platform="pytorch_torchscript",
)


def test_metadata_prepends_the_batch_dimension_and_lists_versions() -> None:
    meta = grpc_codec.model_metadata(model_metadata(record("m", "2.0", tensors=TENSORS), {"2.0", "1.0"}))
    assert meta == pb.ModelMetadataResponse(
        name="m",
        versions=["1.0", "2.0"],
        platform="pytorch_torchscript",
        inputs=[
            pb.ModelMetadataResponse.TensorMetadata(name="INPUT0", datatype="FP32", shape=[-1, 16]),
            pb.ModelMetadataResponse.TensorMetadata(name="TEXT", datatype="BYTES", shape=[-1, -1]),
        ],
        outputs=[pb.ModelMetadataResponse.TensorMetadata(name="OUTPUT0", datatype="BF16", shape=[-1, -1, 4])],
    )


def test_metadata_of_an_undeclared_model() -> None:
    meta = model_metadata(record("m", "1.0"), {"1.0"})
    assert (meta.platform, meta.inputs, meta.outputs) == ("torchserve", (), ())


def test_config_has_what_perf_analyzer_reads() -> None:
    rec = record(
        "m", "1.0", tensors=TENSORS, batch_size=4, max_batch_delay_ms=5, job_queue_size=50, min_workers=2
    )
    config = grpc_codec.model_config(model_config(rec)).config
    assert (config.name, config.platform, config.backend, config.max_batch_size) == (
        "m",
        "pytorch_torchscript",
        "torchserve",
        8,
    )
    assert [(i.name, pb.DataType.Name(i.data_type), list(i.dims), i.optional) for i in config.input] == [
        ("INPUT0", "TYPE_FP32", [16], False),
        ("TEXT", "TYPE_STRING", [-1], True),
    ]
    assert [(o.name, pb.DataType.Name(o.data_type), list(o.dims)) for o in config.output] == [
        ("OUTPUT0", "TYPE_BF16", [-1, 4])
    ]
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 5000
    assert config.dynamic_batching.default_queue_policy.max_queue_size == 50
    assert not config.model_transaction_policy.decoupled
    assert config.instance_group[0].count == 2
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU


def test_config_without_batching_and_decoupled() -> None:
    rec = record("m", "1.0", tensors=ModelTensors(decoupled=True), device_type="gpu")
    config = grpc_codec.model_config(model_config(rec)).config
    assert config.WhichOneof("scheduling_choice") is None
    assert config.max_batch_size == 0
    assert config.model_transaction_policy.decoupled
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_GPU


def test_config_of_a_stateful_version_reports_the_sequence_batcher() -> None:
    stateful = {"sequence_batching": True, "sequence_max_idle_ms": 3000, "max_batch_delay_ms": 7}
    config = grpc_codec.model_config(model_config(record("m", "1.0", batch_size=4, **stateful))).config
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"
    assert config.sequence_batching.max_sequence_idle_microseconds == 3_000_000
    assert config.sequence_batching.WhichOneof("strategy_choice") == "direct"
    assert config.sequence_batching.direct.max_queue_delay_microseconds == 7000
    # sequenceBatching without an idle time: not stateful (TorchServe's rule), so no sequence batcher.
    plain = {**stateful, "sequence_max_idle_ms": 0}
    config = grpc_codec.model_config(model_config(record("m", "1.0", batch_size=4, **plain))).config
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"


def test_server_metadata_lists_exactly_the_implemented_extensions() -> None:
    message = grpc_codec.server_metadata(ServerMetadata("sluice", "0.1.0", EXTENSIONS))
    assert list(message.extensions) == ["model_configuration", "statistics", "parameters", "generate"]


def test_statistics_accumulate_per_version() -> None:
    stats = InferenceStats()
    stats.record("m", "1", Outcome(True, 1000, 5, batch_size=4, queue_ns=300))
    stats.record("m", "1", Outcome(True, 2000, 9))
    stats.record("m", "1", Outcome(False, 500, 10))
    got = stats.get("m", "1")
    assert (got.success, got.fail, got.queue, got.compute_infer) == (
        Duration(2, 3000),
        Duration(1, 500),
        Duration(1, 300),
        Duration(1, 700),
    )
    assert (got.inference_count, got.execution_count, got.last_inference_ms) == (5, 2, 9)
    message = grpc_codec.statistics([StatsEntry("m", "1", got), StatsEntry("m", "2", stats.get("m", "2"))])
    assert message.model_stats[0].inference_stats.success.count == 2
    assert message.model_stats[0].last_inference == 9
    assert message.model_stats[1].inference_count == 0


def test_repository_index() -> None:
    message = grpc_codec.repository_index([IndexEntry("m", "1", "READY", "")])
    assert message.models[0] == pb.RepositoryIndexResponse.ModelIndex(name="m", version="1", state="READY")


def test_readiness_policies() -> None:
    from sluice.registry.records import StartupModel, StartupReport

    report = StartupReport(
        manager_pid=1,
        started_unix_ms=0,
        done=True,
        models=[StartupModel(model_name="m", version="1", min_workers=2)],
    )
    assert not startup_complete(None, {})
    assert not startup_complete(dataclasses.replace(report, done=False), {("m", "1"): 2})
    assert not startup_complete(report, {("m", "1"): 1})
    assert startup_complete(report, {("m", "1"): 2})
    assert startup_complete(dataclasses.replace(report, models=[]), {})
    assert not version_ready(0, 0)
    assert version_ready(0, 1)
    assert not version_ready(2, 1)
