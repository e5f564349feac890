"""The wire-format reader, and a large job's request split off without copies."""

import pytest
from sluice import envelope, wire
from sluice.envelope import Job, WireProtocol
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest

BIG = bytes(range(256)) * 1024  # 256 KiB: past envelope.LARGE_JOB_BYTES


def test_fields_are_read_with_their_spans() -> None:
    raw = PredictionsRequest(model_name="m", input={"a": b"xy"}, sequence_id="s").SerializeToString()
    read = [
        (n, t, bytes(v) if isinstance(v, memoryview) else v)
        for n, t, v, _s, _e in wire.fields(memoryview(raw))
    ]
    assert read[0] == (1, wire.LENGTH_DELIMITED, b"m")
    assert read[-1] == (4, wire.LENGTH_DELIMITED, b"s")
    spans = [(s, e) for *_rest, s, e in wire.fields(memoryview(raw))]
    # The spans tile the message: each field starts where the previous one ended.
    assert [start for start, _end in spans] == [0, *(end for _start, end in spans[:-1])]
    assert spans[-1][1] == len(raw)


@pytest.mark.parametrize("raw", [b"\x0a\x05ab", b"\x80", b"\x0b", b"\x00\x01", b"\x0d\x01\x02"])
def test_broken_bytes_are_refused(raw: bytes) -> None:
    with pytest.raises(wire.WireError):
        list(wire.fields(memoryview(raw)))


def test_a_large_jobs_request_is_a_view_into_the_entry() -> None:
    job = Job(job_id="j", protocol=WireProtocol.TORCHSERVE_GRPC, model_name="m", headers={"h": "v"})
    raw = envelope.encode_job_with_request(job, BIG)
    decoded, request = envelope.decode_job_split(raw)
    assert isinstance(request, memoryview)
    assert (bytes(request), decoded.job_id, dict(decoded.headers), decoded.request) == (
        BIG,
        "j",
        {"h": "v"},
        b"",
    )


def test_a_small_job_and_a_kserve_job_stay_whole() -> None:
    small = envelope.encode_job(Job(job_id="s", protocol=WireProtocol.TORCHSERVE_GRPC, request=b"tiny"))
    assert envelope.decode_job_split(small)[0].request == b"tiny"
    kserve = envelope.encode_job_with_request(Job(job_id="k", protocol=WireProtocol.KSERVE), BIG)
    decoded, request = envelope.decode_job_split(kserve)
    assert decoded.request == BIG
    assert request == BIG


def test_a_broken_large_entry_is_an_envelope_error() -> None:
    raw = envelope.encode_job_with_request(Job(job_id="j"), BIG)[:-10] + b"\x0a\xff\xff"
    with pytest.raises(envelope.EnvelopeError):
        envelope.decode_job_split(raw)
