"""frames.decode/encode against TorchServe's own create_predict_response."""

import io
import json

import pytest
import torch
from sluice_worker import frames
from sluice_worker.frames import FrameRow, PredictFrame
from ts.context import Context, RequestProcessor
from ts.protocol.otf_message_handler import create_predict_response


def _context(rows: int) -> Context:
    context = Context("m", "/tmp", {"model": {}}, rows, None, "0.12.0")
    context.request_processor = [RequestProcessor({}) for _ in range(rows)]
    return context


def _ids(*ids: str) -> dict[int, str]:
    return dict(enumerate(ids))


def test_error_frame_has_a_row_per_request_with_the_code() -> None:
    raw = create_predict_response(None, _ids("a", "b"), "Prediction failed", 503)
    frame = frames.decode(raw)
    assert frame == PredictFrame(
        code=503,
        message="Prediction failed",
        rows=(FrameRow("a", 503, b"error"), FrameRow("b", 503, b"error")),
    )
    assert not frame.ok


def test_success_frame_serializes_like_torchserve() -> None:
    tensor = torch.arange(3)
    values = [b"raw", bytearray(b"ba"), "h\u00e9", {"k": [1, 2]}, tensor]
    ids = _ids(*(f"r{i}" for i in range(len(values))))
    frame = frames.decode(
        create_predict_response(values, ids, "Prediction success", 200, context=_context(5))
    )
    assert frame.ok
    assert frame.message == "Prediction success"
    assert [row.request_id for row in frame.rows] == list(ids.values())
    assert [row.status_code for row in frame.rows] == [200] * 5
    assert frame.rows[0].body == b"raw"
    assert frame.rows[1].body == b"ba"
    assert frame.rows[2].body == "h\u00e9".encode()
    assert frame.rows[3].body == json.dumps({"k": [1, 2]}, indent=2).encode()
    assert torch.equal(torch.load(io.BytesIO(frame.rows[4].body), weights_only=True), tensor)


def test_per_row_status_headers_and_content_type() -> None:
    context = _context(2)
    context.set_response_status(418, "I'm a teapot", 1)
    context.set_response_content_type(1, "text/plain")
    context.set_response_header(1, "x-a", "b")
    frame = frames.decode(create_predict_response(["x", "y"], _ids("a", "b"), "ok", 200, context=context))
    assert frame.rows[0] == FrameRow("a", 200, b"x")
    assert frame.rows[1] == FrameRow(
        "b", 418, b"y", content_type="text/plain", reason_phrase="I'm a teapot",
        headers={"content-type": "text/plain", "x-a": "b"},
    )  # fmt: skip


def test_intermediate_frames_mark_the_stream_and_the_final_one_closes_it() -> None:
    context = _context(1)
    chunk = frames.decode(
        create_predict_response(["c0"], _ids("a"), "Intermediate", 200, context=context, ts_stream_next=True)
    )
    assert chunk.rows[0].headers == {"ts_stream_next": "true"}
    final = frames.decode(create_predict_response(["end"], _ids("a"), "done", 200, context=context))
    assert final.rows[0].headers == {"ts_stream_next": "false"}


def test_unserializable_output_becomes_torchserves_503() -> None:
    frame = frames.decode(create_predict_response([object()], _ids("a"), "ok", 200, context=_context(1)))
    assert (frame.code, frame.message) == (503, "Unsupported model output data type.")


@pytest.mark.parametrize(
    "raw",
    [
        create_predict_response(None, _ids("a", "b"), "Prediction failed", 503),
        create_predict_response(["x", b"y"], _ids("a", "b"), "ok", 200, context=_context(2)),
        create_predict_response([], {}, "empty", 200),
    ],
)
def test_encode_is_the_inverse_of_decode(raw: bytearray) -> None:
    assert frames.encode(frames.decode(raw)) == bytes(raw)


def test_encode_then_decode_round_trips() -> None:
    frame = PredictFrame(
        code=200,
        message="m",
        rows=(FrameRow("id-\u00e9", 201, b"\x00\xff", "application/json", "Created", {"a": "1", "b": ""}),),
    )
    assert frames.decode(frames.encode(frame)) == frame


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x00\x00\xc8",  # code only
        frames.encode(PredictFrame(200, "m", ()))[:-2],  # truncated end marker
        frames.encode(PredictFrame(200, "m", ())) + b"x",  # trailing bytes
        b"\x00\x00\x00\xc8\x7f\xff\xff\xff",  # message longer than the frame
        b"\x00\x00\x00\xc8\x00\x00\x00\x02\xff\xfe\xff\xff\xff\xff",  # message is not UTF-8
    ],
)
def test_malformed_frames_raise(raw: bytes) -> None:
    with pytest.raises(frames.FrameError):
        frames.decode(raw)
