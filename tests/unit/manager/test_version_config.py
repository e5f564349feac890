"""TorchServe's precedence rules for a version's settings (torchserve.md section 5.3)."""

from typing import Any

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.registry.records import BatchPolicy, VersionRecord
from sluice_manager.models.manifest import ArchiveContents, Manifest, ManifestModel
from sluice_manager.models.version_config import (
    ModelsJson,
    RegisterOptions,
    ServerDefaults,
    build_record,
    default_model_name,
    parse_models_json,
)
from structlog.testing import capture_logs

DEFAULTS = ServerDefaults()


def contents(yaml: dict[str, Any] | None = None, **model: Any) -> ArchiveContents:
    fields = {"model_name": "m", "model_version": "1.0", "handler": "h.py", **model}
    # mypy does not see the positional default in Manifest's Field(None, alias=...) fields and takes
    # createdOn / archiverVersion for required arguments.
    manifest = Manifest(model=ManifestModel(**fields))  # type: ignore[call-arg]
    return ArchiveContents(manifest, yaml or {})


def record(
    options: RegisterOptions | None = None,
    yaml: dict[str, Any] | None = None,
    models_json: ModelsJson | None = None,
    defaults: ServerDefaults = DEFAULTS,
    **model: Any,
) -> VersionRecord:
    return build_record(
        options or RegisterOptions(url="m.mar"),
        contents(yaml, **model),
        models_json or {},
        defaults,
        model_dir="/runtime/models/x",
        handler="h.py",
        now_unix_ms=5,
    )


def json_for(**conf: Any) -> ModelsJson:
    return {"m": {"1.0": conf}}


def test_defaults() -> None:
    r = record()
    assert (r.model_name, r.version, r.model_url, r.model_dir, r.handler) == (
        "m", "1.0", "m.mar", "/runtime/models/x", "h.py",
    )  # fmt: skip
    assert (r.batch_size, r.max_batch_delay_ms, r.batch_policy) == (1, 100, BatchPolicy.FILL)
    assert (r.response_timeout_s, r.startup_timeout_s) == (120, 120)
    assert (r.min_workers, r.max_workers, r.job_queue_size, r.max_retry_timeout_s) == (0, 0, 100, 300)
    assert (r.client_timeout_ms, r.device_type, r.loaded_at_startup, r.registered_unix_ms) == (
        0,
        "",
        False,
        5,
    )
    assert r.runtime == "python"
    assert r.envelope == ""


@pytest.mark.parametrize(
    ("explicit", "yaml", "json_value", "expected"),
    [
        (8, 4, 2, 8),
        (None, 4, 2, 4),
        (None, None, 2, 2),
        (None, None, None, 1),
        (None, 0, 2, 2),  # non-positive values are not set values
        (0, None, None, 1),
    ],
)
def test_batch_size_explicit_then_yaml_then_models_json_then_default(
    explicit: int | None, yaml: int | None, json_value: int | None, expected: int
) -> None:
    options = RegisterOptions(url="m.mar", batch_size=explicit)
    yaml_conf = {} if yaml is None else {"batchSize": yaml}
    models_json = json_for() if json_value is None else json_for(batchSize=json_value)
    assert record(options, yaml_conf, models_json).batch_size == expected


@pytest.mark.parametrize(
    ("explicit", "yaml", "json_value", "expected"),
    [(5, 50, 500, 5), (None, 50, 500, 50), (None, None, 500, 500), (None, -1, 500, 500), (None, 0, 7, 0)],
)
def test_max_batch_delay_precedence(
    explicit: int | None, yaml: int | None, json_value: int | None, expected: int
) -> None:
    options = RegisterOptions(url="m.mar", max_batch_delay_ms=explicit)
    yaml_conf = {} if yaml is None else {"maxBatchDelay": yaml}
    assert record(options, yaml_conf, json_for(maxBatchDelay=json_value)).max_batch_delay_ms == expected


@pytest.mark.parametrize(
    ("yaml", "json_value", "explicit", "expected"),
    [(10, 20, 30, 10), (None, 20, 30, 20), (None, None, 30, 30), (None, None, None, 77), (0, None, 30, 30)],
)
@pytest.mark.parametrize(
    ("key", "field", "option", "default_field"),
    [
        ("responseTimeout", "response_timeout_s", "response_timeout_s", "default_response_timeout_s"),
        ("startupTimeout", "startup_timeout_s", "startup_timeout_s", "default_startup_timeout_s"),
    ],
)
def test_timeouts_yaml_then_models_json_then_explicit_then_default(
    yaml: int | None,
    json_value: int | None,
    explicit: int | None,
    expected: int,
    key: str,
    field: str,
    option: str,
    default_field: str,
) -> None:
    explicit_option: dict[str, Any] = {option: explicit}
    options = RegisterOptions(url="m.mar", **explicit_option)
    yaml_conf = {} if yaml is None else {key: yaml}
    models_json = json_for() if json_value is None else json_for(**{key: json_value})
    default_setting: dict[str, Any] = {default_field: 77}
    defaults = ServerDefaults(**default_setting)
    assert getattr(record(options, yaml_conf, models_json, defaults), field) == expected


def test_yaml_workers_win_when_valid() -> None:
    r = record(
        RegisterOptions(url="m.mar", initial_workers=5, at_startup=True), {"minWorkers": 2, "maxWorkers": 3}
    )
    assert (r.min_workers, r.max_workers) == (2, 3)


@pytest.mark.parametrize(
    "yaml",
    [
        {"minWorkers": 0, "maxWorkers": 0},
        {"minWorkers": -1, "maxWorkers": 3},
        {"minWorkers": 3, "maxWorkers": 2},
        {},
    ],
)
def test_invalid_yaml_workers_are_ignored(yaml: dict[str, int]) -> None:
    r = record(RegisterOptions(url="m.mar", at_startup=True), yaml)
    assert (r.min_workers, r.max_workers) == (1, 1)


def test_startup_models_get_one_worker_when_default_workers_is_zero() -> None:
    # TorchServe would start one worker per CPU core: the laptop-OOM trap (torchserve.md section 8 row 10).
    r = record(RegisterOptions(url="m.mar", at_startup=True))
    assert (r.min_workers, r.max_workers, r.loaded_at_startup) == (1, 1, True)


def test_startup_models_follow_default_workers_and_models_json() -> None:
    defaults = ServerDefaults(default_workers_per_model=3)
    assert record(RegisterOptions(url="m.mar", at_startup=True), defaults=defaults).min_workers == 3
    r = record(
        RegisterOptions(url="m.mar", at_startup=True), {}, json_for(minWorkers=2, maxWorkers=4), defaults
    )
    assert (r.min_workers, r.max_workers) == (2, 4)


def test_registered_models_start_no_worker_by_default() -> None:
    assert (record().min_workers, record().max_workers) == (0, 0)
    r = record(RegisterOptions(url="m.mar", initial_workers=2))
    assert (r.min_workers, r.max_workers) == (2, 2)
    defaults = ServerDefaults(default_workers_per_model=2)
    assert record(defaults=defaults).min_workers == 2


def test_yaml_only_settings_and_custom_keys() -> None:
    yaml = {
        "jobQueueSize": 7,
        "maxRetryTimeoutInSec": 30,
        "clientTimeoutInMills": 2500,
        "batchPolicy": "eager",
        "handler": {"threshold": 0.5},
        "custom": [1, 2],
    }
    r = record(yaml=yaml)
    assert (r.job_queue_size, r.max_retry_timeout_s, r.client_timeout_ms) == (7, 30, 2500)
    assert r.batch_policy is BatchPolicy.EAGER
    assert r.model_yaml_config == yaml


def test_job_queue_size_falls_back_to_the_server_setting() -> None:
    assert record(yaml={"jobQueueSize": 0}, defaults=ServerDefaults(job_queue_size=9)).job_queue_size == 9


def test_device_type_is_the_yaml_choice_and_gpus_are_the_default() -> None:
    # "" lets placement use a GPU when the host has one (TorchServe's default).
    assert record().device_type == ""
    assert record(yaml={"deviceType": "gpu"}).device_type == "gpu"
    assert record(yaml={"deviceType": "CPU"}).device_type == "cpu"
    with pytest.raises(SluiceError, match="deviceType must be cpu or gpu"):
        record(yaml={"deviceType": "tpu"})


def test_container_limits_from_the_yaml() -> None:
    assert (record().container_cpus, record().container_memory_bytes) == (0.0, 0)
    limited = record(yaml={"containerCpus": 1.5, "containerMemory": "2g"})
    assert (limited.container_cpus, limited.container_memory_bytes) == (1.5, 2 * 1024**3)
    assert record(yaml={"containerMemory": 1048576}).container_memory_bytes == 1048576
    for bad in ({"containerCpus": 0}, {"containerCpus": "two"}, {"containerMemory": "lots"}):
        with pytest.raises(SluiceError, match=r"model-config\.yaml: container"):
            record(yaml=bad)


def test_names_and_envelope() -> None:
    assert record(RegisterOptions(url="m.mar", model_name="other")).model_name == "other"
    assert record(model_name=None).model_name == "m"
    assert record(RegisterOptions(url="sub/x.tar.gz"), model_name=None).model_name == "x"
    assert record(envelope="kserve").envelope == "kserve"
    assert record(defaults=ServerDefaults(service_envelope="json")).envelope == "json"
    assert record(RegisterOptions(url="m.mar", runtime="python3")).runtime == "python3"


@pytest.mark.parametrize(("name", "version"), [("../x", "1.0"), ("m", "1/0"), ("m{x}", "1.0"), ("m", "a:b")])
def test_invalid_names_are_refused(name: str, version: str) -> None:
    with pytest.raises(SluiceError) as info:
        record(RegisterOptions(url="m.mar", model_name=name), model_version=version)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


@pytest.mark.parametrize("yaml", [{"batchSize": "4"}, {"minWorkers": True}, {"batchPolicy": "greedy"}])
def test_wrongly_typed_yaml_is_refused(yaml: dict[str, Any]) -> None:
    with pytest.raises(SluiceError) as info:
        record(yaml=yaml)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_models_json_parsing() -> None:
    text = (
        '{"noop": {"1.0": {"defaultVersion": true, "marName": "noop.mar", "minWorkers": 1, "batchSize": 4}}}'
    )
    assert parse_models_json(text)["noop"]["1.0"]["batchSize"] == 4
    assert parse_models_json("") == {}
    for bad in ("[1]", '{"a": 1}', '{"a": {"1.0": 3}}', "{"):
        with pytest.raises(ValueError):  # noqa: PT011
            parse_models_json(bad)


def test_models_json_with_wrong_types_is_refused() -> None:
    with pytest.raises(SluiceError):
        record(models_json=json_for(batchSize="4"))


@pytest.mark.parametrize(
    ("url", "name"),
    [("a.mar", "a"), ("dir/b.tar.gz", "b"), ("c.model", "c"), ("folder/", "folder"), ("x", "x")],
)
def test_default_model_name(url: str, name: str) -> None:
    assert default_model_name(url) == name


def test_autoscaling_keys_and_their_defaults() -> None:
    default = record(yaml={"batchSize": 4})
    assert (default.target_jobs_per_worker, default.scale_up_after_ms) == (8.0, 2000)
    assert (default.scale_down_after_ms, default.scale_cooldown_ms) == (60000, 10000)
    assert default.target_utilization == 0.8
    tuned = record(
        yaml={
            "targetJobsPerWorker": 3,
            "targetUtilization": 0.6,
            "scaleUpAfterMSec": 500,
            "scaleDownAfterMSec": 5000,
            "scaleCooldownMSec": 0,
        }
    )
    assert (tuned.target_jobs_per_worker, tuned.scale_up_after_ms) == (3.0, 500)
    assert (tuned.scale_down_after_ms, tuned.scale_cooldown_ms, tuned.target_utilization) == (5000, 0, 0.6)
    with pytest.raises(SluiceError, match="targetJobsPerWorker must be a positive number"):
        record(yaml={"targetJobsPerWorker": 0})
    for bad in (0, 1.5, "high"):
        with pytest.raises(SluiceError, match="targetUtilization must be"):
            record(yaml={"targetUtilization": bad})


def test_min_workers_zero_with_a_maximum_scales_from_zero() -> None:
    assert (lambda r: (r.min_workers, r.max_workers))(record(yaml={"minWorkers": 0, "maxWorkers": 2})) == (
        0,
        2,
    )
    # Without room above zero the yaml's range is ignored, as TorchServe ignores minWorkers 0.
    ignored = record(yaml={"minWorkers": 0, "maxWorkers": 0})
    assert (ignored.min_workers, ignored.max_workers) == (0, 0)


def test_sequence_keys_of_a_stateful_model() -> None:
    off = record()
    assert (off.stateful, off.sequence_batching, off.sequence_max_idle_ms) == (False, False, 0)
    assert (off.max_sequence_job_queue_size, off.max_num_sequence, off.sequence_state_max_bytes) == (
        1, 1, 1024 * 1024,
    )  # fmt: skip
    yaml = {
        "sequenceBatching": True, "sequenceMaxIdleMSec": 60000, "sequenceTimeoutMSec": 120000,
        "maxSequenceJobQueueSize": 4, "maxNumSequence": 16, "sequenceStateMaxBytes": 4096,
    }  # fmt: skip
    r = record(yaml=yaml)
    assert r.stateful
    assert (r.sequence_max_idle_ms, r.sequence_timeout_ms) == (60000, 120000)
    assert (r.max_sequence_job_queue_size, r.max_num_sequence, r.sequence_state_max_bytes) == (4, 16, 4096)
    # TorchServe reads 0 as 1 for the two limits.
    zeros = record(
        yaml={**yaml, "maxSequenceJobQueueSize": 0, "maxNumSequence": 0, "sequenceStateMaxBytes": 0}
    )
    assert (zeros.max_sequence_job_queue_size, zeros.max_num_sequence, zeros.sequence_state_max_bytes) == (
        1, 1, 0,
    )  # fmt: skip


def test_sequence_batching_without_an_idle_time_is_not_stateful_and_warns() -> None:
    with capture_logs() as logs:
        r = record(yaml={"sequenceBatching": True})
    assert r.sequence_batching
    assert not r.stateful
    assert [(e["log_level"], e["model"], e["version"]) for e in logs] == [("warning", "m", "1.0")]
    assert "sequenceMaxIdleMSec" in logs[0]["event"]


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ({"sequenceBatching": "yes"}, "sequenceBatching must be true or false"),
        ({"sequenceBatching": 1}, "sequenceBatching must be true or false"),
        ({"sequenceMaxIdleMSec": "60s"}, "sequenceMaxIdleMSec must be an integer"),
        ({"sequenceMaxIdleMSec": -1}, "sequenceMaxIdleMSec must be a non-negative integer"),
        ({"sequenceTimeoutMSec": 1.5}, "sequenceTimeoutMSec must be an integer"),
        ({"maxSequenceJobQueueSize": -2}, "maxSequenceJobQueueSize must be a non-negative integer"),
        ({"maxNumSequence": True}, "maxNumSequence must be an integer"),
        ({"sequenceStateMaxBytes": "1m"}, "sequenceStateMaxBytes must be an integer"),
    ],
)
def test_wrong_sequence_keys_are_refused(yaml: dict[str, Any], message: str) -> None:
    with pytest.raises(SluiceError) as info:
        record(yaml=yaml)
    assert (info.value.code, info.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        f"model-config.yaml: {message}",
    )


def test_generative_keys() -> None:
    plain = record()
    assert (plain.continuous_batching, plain.async_communication, plain.generative) == (False, False, False)
    continuous = record(yaml={"continuousBatching": True, "batchSize": 16})
    assert continuous.continuous_batching
    assert continuous.generative
    assert continuous.slots_per_worker == 16
    asynchronous = record(yaml={"asyncCommunication": True, "batchSize": 2})
    assert asynchronous.async_communication
    assert asynchronous.slots_per_worker == 16
    capped = record(yaml={"asyncCommunication": True, "maxConcurrentRequests": 5})
    assert capped.slots_per_worker == 5
    # TorchServe's sequence continuous batching.
    both = record(yaml={"continuousBatching": True, "sequenceBatching": True, "sequenceMaxIdleMSec": 1000})
    assert both.continuous_batching
    assert both.stateful


@pytest.mark.parametrize(
    ("yaml", "named"),
    [
        ({"parallelType": "tp"}, "parallelType"),
        ({"parallelType": "pp", "parallelLevel": 2}, "parallelType"),
        ({"asyncCommunication": True, "continuousBatching": True}, "asyncCommunication"),
        ({"asyncCommunication": True, "sequenceBatching": True}, "asyncCommunication"),
        ({"continuousBatching": "yes"}, "continuousBatching"),
        ({"maxConcurrentRequests": -1}, "maxConcurrentRequests"),
    ],
)
def test_generative_settings_sluice_cannot_serve_are_refused_clearly(
    yaml: dict[str, Any], named: str
) -> None:
    with pytest.raises(SluiceError) as raised:
        record(yaml=yaml)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    assert named in raised.value.message
