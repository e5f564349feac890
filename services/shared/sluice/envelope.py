"""Typed encode/decode of what travels on Redis streams: :class:`Job` entries and :class:`Reply`
entries, protobuf with a schema version, never pickle. A reader rejects versions it does not know."""

from sluice import wire
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


# Job.request's tag: field 10, length-delimited (wire type 2).
_REQUEST_TAG = bytes([Job.DESCRIPTOR.fields_by_name["request"].number << 3 | 2])


def encode_job_with_request(job: Job, request: bytes) -> bytes:
    """``job`` (its request empty) serialized with ``request`` as its request: the same message a
    parser reads from :func:`encode_job`, but the request is copied once, into the result, instead of
    into the message and then out of it (a payload of megabytes)."""
    job.schema_version = SCHEMA_VERSION
    head = job.SerializeToString()
    if not request:  # as protobuf writes an empty field: not at all
        return head
    return b"".join((head, _REQUEST_TAG, _varint(len(request)), request))


# Jobs at least this large are split (decode_job_split): their request is not copied through the
# parsed message.
LARGE_JOB_BYTES = 64 * 1024
_REQUEST_FIELD = Job.DESCRIPTOR.fields_by_name["request"].number
_PROTOCOL_FIELD = Job.DESCRIPTOR.fields_by_name["protocol"].number


def decode_job_split(raw: bytes) -> tuple[Job, bytes | memoryview]:
    """The job in ``raw`` and its request. A large job's request is a view into ``raw`` (its ``Job``
    has an empty request): parsing it into the message and reading it back out would copy it twice.
    KServe v2 jobs stay whole: their replies are built from their request."""
    if len(raw) < LARGE_JOB_BYTES:
        job = decode_job(raw)
        return job, job.request
    view = memoryview(raw)
    kept: list[memoryview] = []
    request: bytes | memoryview = b""
    protocol = 0
    try:
        for number, wire_type, value, start, end in wire.fields(view):
            if number == _REQUEST_FIELD and wire_type == wire.LENGTH_DELIMITED:
                assert isinstance(value, memoryview)
                request = value  # the last occurrence wins, as protobuf parses it
                continue
            if number == _PROTOCOL_FIELD and isinstance(value, int):
                protocol = value
            kept.append(view[start:end])
    except wire.WireError as exc:
        raise EnvelopeError("job entry is not a valid protobuf Job") from exc
    if protocol == WireProtocol.KSERVE:
        # Its replies are built from the request again (the outputs it asked for): keep it whole.
        job = decode_job(raw)
        return job, job.request
    return decode_job(b"".join(kept)), request


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
