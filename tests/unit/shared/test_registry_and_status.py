from dataclasses import replace

import grpc
import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.registry.reader import choose_version
from sluice.registry.records import WorkerRecord, WorkerStatus
from sluice.transport.status_map import grpc_details, grpc_status, grpc_status_for_http


def test_empty_version_means_default() -> None:
    assert choose_version("m", "", "2.0", {"1.0", "2.0"}) == "2.0"


def test_explicit_version_must_exist() -> None:
    assert choose_version("m", "1.0", "2.0", {"1.0", "2.0"}) == "1.0"
    with pytest.raises(SluiceError) as info:
        choose_version("m", "9.9", "2.0", {"1.0", "2.0"})
    assert info.value.code is ErrorCode.VERSION_NOT_FOUND
    assert info.value.message == "Model version: 9.9 does not exist for model: m"


def test_unknown_model() -> None:
    with pytest.raises(SluiceError) as info:
        choose_version("nope", "", None, set())
    assert info.value.message == "Model not found: nope"


@pytest.mark.parametrize(
    ("http", "code"),
    [
        (200, grpc.StatusCode.OK),
        (400, grpc.StatusCode.INVALID_ARGUMENT),
        (404, grpc.StatusCode.NOT_FOUND),
        (409, grpc.StatusCode.ABORTED),
        (418, grpc.StatusCode.FAILED_PRECONDITION),
        (503, grpc.StatusCode.UNAVAILABLE),
        (507, grpc.StatusCode.INTERNAL),
        (600, grpc.StatusCode.UNKNOWN),
    ],
)
def test_torchserve_http_to_grpc_table(http: int, code: grpc.StatusCode) -> None:
    assert grpc_status_for_http(http) is code


def test_handler_errors_use_their_http_status() -> None:
    error = SluiceError(ErrorCode.HANDLER_FAILED, "bad input", http_status=400)
    assert grpc_status(error) is grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_details(error) == "bad input\norg.pytorch.serve.http.InternalServerException"


def test_every_code_has_a_grpc_status() -> None:
    for code in ErrorCode:
        assert grpc_status(SluiceError(code, "x")) is not None


def test_a_generative_workers_load_counts_its_taken_slots() -> None:
    plain = WorkerRecord(worker_id="w", pid=1, host="h", status=WorkerStatus.READY, started_unix_ms=0)
    assert plain.load_share == 0.0
    busy = replace(plain, busy_share=0.4)
    assert busy.load_share == 0.4
    # Six of eight slots held by generations that leave the handler idle between iterations.
    assert replace(busy, running=6, slots=8).load_share == 0.75
    assert replace(busy, running=1, slots=8).load_share == 0.4
    assert replace(plain, running=9, slots=8).load_share == 1.0
