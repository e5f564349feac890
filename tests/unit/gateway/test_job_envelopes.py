"""Job building and failure-reply mapping (pure)."""

import pytest
from sluice.envelope import Reply, WireProtocol, decode_job, encode_job
from sluice.errors import ErrorCode
from sluice_gateway.job_envelopes import build_job, effective_timeout_s, failure_from_reply, new_job_id


def test_build_job_carries_everything_the_worker_needs() -> None:
    job = build_job(
        job_id="abc",
        protocol=WireProtocol.TORCHSERVE_GRPC,
        model="echo",
        version="1.0",
        reply_to="sluice:{gw:g1}:replies",
        request=b"\x0a\x04echo",
        now_ms=1_000,
        timeout_s=2.5,
        streaming=True,
        headers={"ts_request_sequence_id": "s"},
    )
    decoded = decode_job(encode_job(job))
    assert decoded.job_id == "abc"
    assert decoded.protocol == WireProtocol.TORCHSERVE_GRPC
    assert (decoded.model_name, decoded.model_version) == ("echo", "1.0")
    assert decoded.reply_to == "sluice:{gw:g1}:replies"
    assert decoded.request == b"\x0a\x04echo"
    assert (decoded.enqueued_unix_ms, decoded.deadline_unix_ms) == (1_000, 3_500)
    assert decoded.streaming
    assert not decoded.final_only
    assert dict(decoded.headers) == {"ts_request_sequence_id": "s"}


def test_build_job_marks_a_call_that_takes_one_answer() -> None:
    job = build_job(
        job_id="abc",
        protocol=WireProtocol.KSERVE,
        model="llm",
        version="1",
        reply_to="r",
        request=b"",
        now_ms=0,
        timeout_s=1,
        final_only=True,
    )
    decoded = decode_job(encode_job(job))
    assert decoded.final_only
    assert not decoded.streaming


def test_job_ids_are_uuid4_hex() -> None:
    first, second = new_job_id(), new_job_id()
    assert len(first) == 32
    assert int(first, 16) >= 0
    assert first != second


@pytest.mark.parametrize(
    ("client_s", "default_s", "version_s", "expected"),
    [(1.5, 9.0, 120.0, 1.5), (None, 9.0, 120.0, 9.0), (None, None, 120.0, 120.0), (-1.0, None, 5.0, 0.0)],
)
def test_effective_timeout(
    client_s: float | None, default_s: float | None, version_s: float, expected: float
) -> None:
    assert effective_timeout_s(client_s, default_s, version_s) == expected


def test_failure_reply_becomes_the_domain_error_with_its_status() -> None:
    error = failure_from_reply(
        Reply(job_id="j", final=True, error_code="HANDLER_FAILED", status_code=404, message="nope")
    )
    assert (error.code, error.http_status, error.message) == (ErrorCode.HANDLER_FAILED, 404, "nope")


def test_worker_died_reply_keeps_its_code() -> None:
    error = failure_from_reply(
        Reply(final=True, error_code="WORKER_DIED", status_code=500, message="Worker died.")
    )
    assert (error.code, error.message) == (ErrorCode.WORKER_DIED, "Worker died.")


def test_unknown_error_code_is_a_handler_failure() -> None:
    error = failure_from_reply(Reply(final=True, error_code="FROM_THE_FUTURE", status_code=503))
    assert (error.code, error.http_status, error.message) == (
        ErrorCode.HANDLER_FAILED,
        503,
        "Prediction failed",
    )


def test_missing_status_uses_the_codes_default() -> None:
    error = failure_from_reply(Reply(final=True, error_code="WORKER_DIED", message="Worker died."))
    assert error.http_status == 500
