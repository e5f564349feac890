"""Reply sequencing: seq per job from 0, one final reply per job, TorchServe's errors."""

from sluice.envelope import Job, WireProtocol
from sluice.errors import ErrorCode
from sluice.v1.torchserve_inference_pb2 import PredictionResponse
from sluice_worker.delivery import Delivery
from sluice_worker.frames import FrameRow, PredictFrame
from sluice_worker.replies import WORKER_DIED, ReplyBook

REPLY_TO = "sluice:{gw:g}:replies"


def _delivery(job_id: str, streaming: bool = False, attempt: int = 1) -> Delivery:
    job = Job(job_id=job_id, protocol=WireProtocol.TORCHSERVE_GRPC, reply_to=REPLY_TO, streaming=streaming)
    return Delivery(receipt=job_id.encode(), job=job, attempt=attempt)


def _frame(code: int, *rows: tuple[str, bytes], message: str = "m") -> PredictFrame:
    return PredictFrame(code, message, tuple(FrameRow(job_id, 200, body) for job_id, body in rows))


def test_streaming_job_gets_numbered_intermediates_then_one_final() -> None:
    book = ReplyBook([_delivery("a", streaming=True, attempt=2)])
    first = book.intermediate(_frame(200, ("a", b"c0")))
    second = book.intermediate(_frame(200, ("a", b"c1")))
    final = book.final(_frame(200, ("a", b"end")))
    replies = [o.reply for o in first + second + final]
    assert [(r.seq, r.final, r.attempt) for r in replies] == [(0, False, 2), (1, False, 2), (2, True, 2)]
    assert [PredictionResponse.FromString(r.payload).prediction for r in replies] == [b"c0", b"c1", b"end"]
    assert all(o.reply_to == REPLY_TO for o in first + second + final)
    assert book.unfinished() == []


def test_jobs_of_a_batch_get_intermediates_too() -> None:
    # A TorchServe REST call streams from inside a batch: Job.streaming only means "run alone".
    book = ReplyBook([_delivery("a"), _delivery("b")])
    chunks = book.intermediate(_frame(200, ("a", b"a0"), ("b", b"b0")))
    assert [(o.reply.job_id, o.reply.seq, o.reply.final) for o in chunks] == [
        ("a", 0, False),
        ("b", 0, False),
    ]
    finals = book.final(_frame(200, ("a", b"a1"), ("b", b"b1")))
    assert [(o.reply.job_id, o.reply.seq, o.reply.final) for o in finals] == [("a", 1, True), ("b", 1, True)]


def test_error_frame_fails_the_whole_batch_with_the_handler_status() -> None:
    book = ReplyBook([_delivery("a"), _delivery("b")])
    out = book.final(_frame(404, ("a", b"error"), ("b", b"error"), message="nope"))
    assert [(o.reply.job_id, o.reply.status_code, o.reply.message, o.reply.error_code) for o in out] == [
        ("a", 404, "nope", ErrorCode.HANDLER_FAILED.value),
        ("b", 404, "nope", ErrorCode.HANDLER_FAILED.value),
    ]
    assert all(o.reply.final and not o.reply.payload for o in out)


def test_intermediate_error_frame_finishes_the_job_and_later_results_are_dropped() -> None:
    book = ReplyBook([_delivery("a", streaming=True)])
    (failed,) = book.intermediate(_frame(500, ("a", b"error"), message="broken"))
    assert (failed.reply.final, failed.reply.status_code) == (True, 500)
    assert book.intermediate(_frame(200, ("a", b"late"))) == []
    assert book.final(_frame(200, ("a", b"end"))) == []


def test_unknown_request_ids_are_dropped_and_missing_rows_fail() -> None:
    book = ReplyBook([_delivery("a"), _delivery("b")])
    out = book.final(_frame(200, ("a", b"ok"), ("zzz", b"?")))
    by_job = {o.reply.job_id: o.reply for o in out}
    assert set(by_job) == {"a", "b"}
    assert by_job["a"].error_code == ""
    assert by_job["b"].error_code == ErrorCode.INTERNAL.value


def test_fail_all_answers_unfinished_jobs_after_their_intermediates() -> None:
    book = ReplyBook([_delivery("a", streaming=True), _delivery("b")])
    book.intermediate(_frame(200, ("a", b"c0")))
    died = book.fail_all(WORKER_DIED)
    assert [(o.reply.job_id, o.reply.seq, o.reply.final, o.reply.status_code) for o in died] == [
        ("a", 1, True, 500),
        ("b", 0, True, 500),
    ]
    assert {(o.reply.message, o.reply.error_code) for o in died} == {("Worker died.", "WORKER_DIED")}
    assert {o.reply.started_unix_ms for o in died} == {0}
    assert book.fail_all(WORKER_DIED) == []


def test_row_status_headers_and_content_type_are_passed_on() -> None:
    book = ReplyBook([_delivery("a")], started_unix_ms=1234)
    row = FrameRow("a", 418, b"tea", content_type="text/plain", reason_phrase="teapot", headers={"x": "y"})
    (out,) = book.final(PredictFrame(200, "ok", (row,)))
    assert (out.reply.reason_phrase, out.reply.started_unix_ms) == ("teapot", 1234)
    assert (out.reply.status_code, out.reply.content_type, dict(out.reply.headers)) == (
        418,
        "text/plain",
        {"x": "y"},
    )
