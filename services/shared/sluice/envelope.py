"""Typed encode/decode of what travels on Redis streams: :class:`Job` entries and :class:`Reply`
entries, protobuf with a schema version, never pickle. A reader rejects versions it does not know."""

from sluice.v1.job_pb2 import Job, Reply, WireProtocol

SCHEMA_VERSION = 1

# Stream entry field that holds the encoded message (one field keeps XADD and parsing cheap).
FIELD = b"m"

__all__ = [
    "FIELD",
    "SCHEMA_VERSION",
    "EnvelopeError",
    "Job",
    "Reply",
    "WireProtocol",
    "decode_job",
    "decode_reply",
    "encode_job",
    "encode_reply",
]


class EnvelopeError(ValueError):
    """An entry that is not a valid message of a known schema version."""


def encode_job(job: Job) -> bytes:
    job.schema_version = SCHEMA_VERSION
    return job.SerializeToString()


def decode_job(raw: bytes) -> Job:
    job = Job()
    try:
        job.ParseFromString(raw)
    except Exception as exc:  # protobuf raises DecodeError or RuntimeWarning-like errors
        raise EnvelopeError("job entry is not a valid protobuf Job") from exc
    if job.schema_version != SCHEMA_VERSION:
        raise EnvelopeError(f"job schema version {job.schema_version} is not supported")
    return job


def encode_reply(reply: Reply) -> bytes:
    reply.schema_version = SCHEMA_VERSION
    return reply.SerializeToString()


def decode_reply(raw: bytes) -> Reply:
    reply = Reply()
    try:
        reply.ParseFromString(raw)
    except Exception as exc:
        raise EnvelopeError("reply entry is not a valid protobuf Reply") from exc
    if reply.schema_version != SCHEMA_VERSION:
        raise EnvelopeError(f"reply schema version {reply.schema_version} is not supported")
    return reply
