"""TorchServe's management JSON as pure functions: ListModels paging and DescribeModel entries."""

import json

import pytest
from sluice.registry.records import VersionRecord
from sluice.typed import build
from sluice_manager.api.model_views import (
    VersionView,
    WorkerView,
    describe_json,
    model_list,
    page,
    pretty,
    timestamp,
)

DESCRIBE_ORDER = [
    "modelName", "modelVersion", "modelUrl", "runtime", "minWorkers", "maxWorkers", "batchSize",
    "maxBatchDelay", "responseTimeout", "startupTimeout", "maxRetryTimeoutInSec", "clientTimeoutInMills",
    "parallelType", "parallelLevel", "deviceType", "continuousBatching", "useJobTicket", "useVenv",
    "stateful", "sequenceMaxIdleMSec", "sequenceTimeoutMSec", "maxNumSequence", "maxSequenceJobQueueSize",
    "loadedAtStartup", "workers", "jobQueueStatus",
    # Sluice's additions, after TorchServe's fields.
    "autoscaling",
]  # fmt: skip


SEQUENCE_FIELDS = [
    "stateful",
    "sequenceMaxIdleMSec",
    "sequenceTimeoutMSec",
    "maxNumSequence",
    "maxSequenceJobQueueSize",
]


@pytest.mark.parametrize(
    ("total", "limit", "token", "expected"),
    [
        (4, 2, 0, (0, 2, "2")),
        (4, 2, 2, (2, 4, "4")),
        (4, 2, 4, (4, 4, None)),  # offset + limit past the end: no token, empty page
        (4, 0, 0, (0, 0, "0")),  # gRPC's all-defaults request: an empty page with token "0"
        (0, 0, 0, (0, 0, "0")),
        (4, 101, 0, (0, 4, None)),  # above 100 means 100
        (4, -5, 0, (0, 4, None)),  # negative means 100
        (4, 2, -3, (0, 2, "2")),  # a negative token means 0
        (4, 3, 10, (10, 4, None)),  # a token past the end: empty page
        (150, -1, 0, (0, 100, "100")),
    ],
)
def test_torchserve_paging(total: int, limit: int, token: int, expected: tuple[int, int, str | None]) -> None:
    window = page(total, limit, token)
    assert (window.start, window.stop, window.next_token) == expected


def test_model_list_shape() -> None:
    assert model_list([], "0") == {"nextPageToken": "0", "models": []}
    body = model_list([("a", "a.mar")], None)
    assert list(body) == ["models"]
    assert body["models"] == [{"modelName": "a", "modelUrl": "a.mar"}]
    assert json.loads(pretty(body)) == body
    assert pretty({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}'


def record(**fields: object) -> VersionRecord:
    base: dict[str, object] = {
        "model_name": "echo", "version": "2.0", "model_url": "echo.mar", "model_dir": "/x",
        "handler": "handler.py", "job_queue_size": 10,
    }  # fmt: skip
    return build(VersionRecord, {**base, **fields}, "")


def test_describe_entry_order_and_values() -> None:
    workers = (
        WorkerView("9000", True, 11, 1_700_000_000_123, 1024, False),
        WorkerView("9001", False, 12, 1_700_000_000_000),
    )
    entry = describe_json(VersionView(record(min_workers=2, max_workers=3), workers, pending_jobs=4))
    assert list(entry) == DESCRIBE_ORDER
    assert entry["jobQueueStatus"] == {"remainingCapacity": 6, "pendingRequests": 4}
    assert entry["workers"][0] == {
        "id": "9000", "startTime": "2023-11-14T22:13:20.123Z", "status": "READY", "memoryUsage": 1024,
        "pid": 11, "gpu": False, "gpuUsage": "N/A",
    }  # fmt: skip
    assert entry["workers"][1]["status"] == "UNLOADING"
    assert (entry["minWorkers"], entry["maxWorkers"], entry["deviceType"]) == (2, 3, "cpu")
    assert entry["autoscaling"] == {
        "desiredWorkers": 2, "targetUtilization": 0.8, "targetJobsPerWorker": 2.0, "scaleUpAfterMSec": 2000,
        "scaleDownAfterMSec": 60000, "scaleCooldownMSec": 10000,
    }  # fmt: skip


def test_describe_shows_the_autoscalers_choice() -> None:
    view = VersionView(record(min_workers=1, max_workers=4), (), pending_jobs=9, desired_workers=3)
    assert describe_json(view)["autoscaling"]["desiredWorkers"] == 3


def test_describe_shows_the_sequence_settings_as_torchserve_does() -> None:
    off = describe_json(VersionView(record(), (), pending_jobs=0))
    assert [off[k] for k in SEQUENCE_FIELDS] == [False, 0, 0, 0, 0]
    stateful = record(
        sequence_batching=True, sequence_max_idle_ms=500, sequence_timeout_ms=9000,
        max_sequence_job_queue_size=3, max_num_sequence=2, batch_size=4, max_workers=2,
    )  # fmt: skip
    entry = describe_json(VersionView(stateful, (), pending_jobs=0))
    # maxNumSequence is the effective limit: max(maxNumSequence, batchSize * maxWorkers).
    assert [entry[k] for k in SEQUENCE_FIELDS] == [True, 500, 9000, 8, 3]
    no_idle_time = record(sequence_batching=True, max_num_sequence=5)
    assert [describe_json(VersionView(no_idle_time, (), 0))[k] for k in SEQUENCE_FIELDS] == [
        False,
        0,
        0,
        0,
        0,
    ]


def test_describe_customized_metadata_comes_last() -> None:
    entry = describe_json(VersionView(record(), (), pending_jobs=20), {"labels": 3})
    assert list(entry)[-1] == "customizedMetadata"
    assert entry["customizedMetadata"] == {"labels": 3}
    assert entry["jobQueueStatus"]["remainingCapacity"] == 0


def test_timestamp_is_torchserve_format_in_utc() -> None:
    assert timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert timestamp(1_000_000_000_007) == "2001-09-09T01:46:40.007Z"
