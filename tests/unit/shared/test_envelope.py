import pytest
from sluice import envelope
from sluice.envelope import EnvelopeError, Job, Reply, WireProtocol


def test_job_round_trip_keeps_every_field() -> None:
    job = Job(
        job_id="abc",
        protocol=WireProtocol.TORCHSERVE_GRPC,
        model_name="mnist",
        model_version="1.0",
        reply_to="sluice:{gw:1}:replies",
        deadline_unix_ms=123,
        streaming=True,
        headers={"ts_request_sequence_id": "s1"},
        request=b"\x00\x01",
    )
    decoded = envelope.decode_job(envelope.encode_job(job))
    assert decoded == job
    assert decoded.schema_version == envelope.SCHEMA_VERSION


def test_reply_round_trip() -> None:
    reply = Reply(job_id="j", seq=2, final=True, status_code=503, message="Prediction failed")
    assert envelope.decode_reply(envelope.encode_reply(reply)) == reply


def test_unknown_schema_version_is_rejected() -> None:
    raw = Job(schema_version=99, job_id="x").SerializeToString()
    with pytest.raises(EnvelopeError, match="schema version 99"):
        envelope.decode_job(raw)


def test_garbage_is_rejected_not_crashing() -> None:
    with pytest.raises(EnvelopeError):
        envelope.decode_job(b"\xff\xff\xff\xff")
    with pytest.raises(EnvelopeError):
        envelope.decode_reply(b"\x08")


def test_pickle_bytes_are_not_a_job() -> None:
    pickled = b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x01x\x94."
    with pytest.raises(EnvelopeError):
        envelope.decode_job(pickled)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 70_000, 3_000_000])
def test_a_request_appended_to_the_job_reads_as_the_jobs_request(size: int) -> None:
    request = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    job = Job(job_id="j", model_name="m", model_version="1", headers={"a": "b"})
    encoded = envelope.encode_job_with_request(job, request)
    decoded = envelope.decode_job(encoded)
    assert (decoded.request, decoded.job_id, dict(decoded.headers)) == (request, "j", {"a": "b"})
    assert encoded == envelope.encode_job(
        Job(job_id="j", model_name="m", model_version="1", headers={"a": "b"}, request=request)
    )
