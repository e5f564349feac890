"""TorchServe's predict-response frame (``ts.protocol.otf_message_handler.create_predict_response``).

``Service.predict`` returns one, and ``send_intermediate_predict_response`` writes one to
``context.cl_socket``. Layout, big-endian, every string/bytes field prefixed by a signed 32-bit length:

    int code | str message
    per request: str request_id | str content_type | int status | str phrase
                 | int header_count, (str key, str value) * header_count | bytes body
    int -1 (end of list)
"""

import struct
from dataclasses import dataclass, field

_INT = struct.Struct("!i")
END_OF_LIST = -1


class FrameError(ValueError):
    """Bytes that are not a well-formed predict-response frame."""


@dataclass(frozen=True)
class FrameRow:
    """One request's result inside a frame."""

    request_id: str
    status_code: int
    body: bytes
    content_type: str = ""
    reason_phrase: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PredictFrame:
    code: int
    message: str
    rows: tuple[FrameRow, ...]

    @property
    def ok(self) -> bool:
        return self.code == 200


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def peek_int(self) -> int:
        if self._pos + _INT.size > len(self._data):
            raise FrameError(f"frame truncated at byte {self._pos}")
        (value,) = _INT.unpack_from(self._data, self._pos)
        return int(value)

    def read_int(self) -> int:
        value = self.peek_int()
        self._pos += _INT.size
        return value

    def read_bytes(self) -> bytes:
        length = self.read_int()
        if length < 0 or self._pos + length > len(self._data):
            raise FrameError(f"bad field length {length} at byte {self._pos}")
        value = self._data[self._pos : self._pos + length]
        self._pos += length
        return value

    def read_str(self) -> str:
        try:
            return self.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError("frame string is not UTF-8") from exc

    @property
    def exhausted(self) -> bool:
        return self._pos == len(self._data)


def decode(data: bytes | bytearray) -> PredictFrame:
    reader = _Reader(bytes(data))
    code = reader.read_int()
    message = reader.read_str()
    rows: list[FrameRow] = []
    while reader.peek_int() != END_OF_LIST:
        rows.append(_decode_row(reader))
    reader.read_int()
    if not reader.exhausted:
        raise FrameError("trailing bytes after the end of the frame")
    return PredictFrame(code=code, message=message, rows=tuple(rows))


def _decode_row(reader: _Reader) -> FrameRow:
    request_id = reader.read_str()
    content_type = reader.read_str()
    status_code = reader.read_int()
    reason_phrase = reader.read_str()
    header_count = reader.read_int()
    if header_count < 0:
        raise FrameError(f"bad header count {header_count}")
    headers = {}
    for _ in range(header_count):
        key = reader.read_str()
        headers[key] = reader.read_str()
    return FrameRow(
        request_id=request_id,
        status_code=status_code,
        body=reader.read_bytes(),
        content_type=content_type,
        reason_phrase=reason_phrase,
        headers=headers,
    )


def encode(frame: PredictFrame) -> bytes:
    """The inverse of :func:`decode` (byte-identical to what TorchServe writes)."""
    out = bytearray(_INT.pack(frame.code))
    _put(out, frame.message.encode("utf-8"))
    for row in frame.rows:
        _put(out, row.request_id.encode("utf-8"))
        _put(out, row.content_type.encode("utf-8"))
        out += _INT.pack(row.status_code)
        _put(out, row.reason_phrase.encode("utf-8"))
        out += _INT.pack(len(row.headers))
        for key, value in row.headers.items():
            _put(out, key.encode("utf-8"))
            _put(out, value.encode("utf-8"))
        _put(out, row.body)
    out += _INT.pack(END_OF_LIST)
    return bytes(out)


def _put(out: bytearray, value: bytes) -> None:
    out += _INT.pack(len(value))
    out += value
