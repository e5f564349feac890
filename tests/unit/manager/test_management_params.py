"""Each transport's TorchServe defaults, converted into the one domain request (pure functions)."""

import pytest
from sluice.errors import ErrorCode, SluiceError
from sluice.v1 import torchserve_management_pb2 as pb
from sluice_manager.api.grpc_api.management import register_request, scale_request
from sluice_manager.api.management_calls import RegisterRequest, ScaleRequest, check_runtime, scaled_message
from sluice_manager.api.rest_api import params


def test_grpc_register_zero_values_mean_unset_and_synchronous_defaults_false() -> None:
    assert register_request(pb.RegisterModelRequest(url="x.mar")) == RegisterRequest(
        url="x.mar", synchronous=False
    )
    request = register_request(
        pb.RegisterModelRequest(
            url="x.mar", model_name="m", handler="h.py", runtime="python", batch_size=4, max_batch_delay=-1,
            initial_workers=2, synchronous=True, response_timeout=0, startup_timeout=7,
        )
    )  # fmt: skip
    assert request == RegisterRequest(
        url="x.mar", model_name="m", handler="h.py", runtime="python", batch_size=4, max_batch_delay_ms=None,
        initial_workers=2, synchronous=True, response_timeout_s=None, startup_timeout_s=7,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0, 0, (1, 1)), (-3, 0, (1, 1)), (2, 0, (2, 2)), (2, 5, (2, 5)), (3, 1, (3, 1))],
)
def test_grpc_scale_min_defaults_to_1_and_max_to_min(low: int, high: int, expected: tuple[int, int]) -> None:
    request = scale_request(pb.ScaleWorkerRequest(model_name="m", min_worker=low, max_worker=high))
    assert (request.min_workers, request.max_workers, request.version, request.synchronous) == (
        *expected, None, False,
    )  # fmt: skip


def test_rest_register_query_defaults() -> None:
    assert params.register_from_query({}) == RegisterRequest(url="", synchronous=True)
    request = params.register_from_query(
        {
            "url": "a.mar",
            "initial_workers": "0",
            "synchronous": "FALSE",
            "batch_size": "x",
            "max_batch_delay": "0",
        }
    )
    assert request == RegisterRequest(url="a.mar", initial_workers=0, synchronous=False, max_batch_delay_ms=0)
    assert params.register_from_query({"url": "a.mar", "synchronous": "yes"}).synchronous is False


def test_rest_register_json_body() -> None:
    request = params.register_from_json(
        b'{"url": "a.mar", "batch_size": "4", "initial_workers": 1, "synchronous": "true"}'
    )
    assert request == RegisterRequest(url="a.mar", batch_size=4, initial_workers=1, synchronous=True)
    assert params.register_from_json(b"") == RegisterRequest(url="")
    for bad in (b"[1]", b"{", b'{"batch_size": true}', b'{"url": 3}', b'{"synchronous": 1}'):
        with pytest.raises(SluiceError) as info:
            params.register_from_json(bad)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_rest_integers_follow_netty_utils() -> None:
    assert params.integer({"limit": "7"}, "limit", 100) == 7
    assert params.integer({"limit": "seven"}, "limit", 100) == 100
    assert params.integer({"limit": "99999999999"}, "limit", 100) == 100
    assert params.integer({}, "limit", 100) == 100
    assert params.integer({"limit": "-4"}, "limit", 100) == -4


def test_runtime_values() -> None:
    for ok in (None, "python", "python3"):
        check_runtime(ok)
    with pytest.raises(SluiceError) as info:
        check_runtime("python4")
    assert (info.value.code, info.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        "Invalid RuntimeType value: python4",
    )
    with pytest.raises(SluiceError):
        check_runtime("LSP")


def test_scaled_message_names_the_version_only_when_asked() -> None:
    assert scaled_message("m", None, 2) == "Workers scaled to 2 for model: m"
    assert scaled_message("m", "2.0", 2) == "Workers scaled to 2 for model: m, version: 2.0"
    assert ScaleRequest("m", None, 1, 1).synchronous is False


@pytest.mark.parametrize(("timeout", "expected"), [(0, None), (-1, None), (7, 7), (-5, -5)])
def test_grpc_scale_timeout_zero_is_unset_as_every_proto3_int(timeout: int, expected: int | None) -> None:
    # -5 reaches the domain, which refuses it.
    request = scale_request(pb.ScaleWorkerRequest(model_name="m", timeout=timeout, number_gpu=2))
    assert (request.stop_timeout_s, request.number_gpu) == (expected, 2)


def test_rest_scale_query_defaults_timeout_and_number_gpu() -> None:
    assert params.scale_from_query("m", None, {}) == ScaleRequest("m", None, 1, 1)
    request = params.scale_from_query(
        "m", "2.0", {"min_worker": "2", "synchronous": "true", "timeout": "0", "number_gpu": "1"}
    )
    assert request == ScaleRequest("m", "2.0", 2, 2, synchronous=True, stop_timeout_s=0, number_gpu=1)
    # -1, like an absent or unparsable timeout, is the manager's default.
    for query in ({"timeout": "-1"}, {"timeout": "soon"}):
        assert params.scale_from_query("m", None, query).stop_timeout_s is None
    assert params.scale_from_query("m", None, {"timeout": "30"}).stop_timeout_s == 30
    assert params.scale_from_query("m", None, {"model_version": "3.0"}).version == "3.0"
