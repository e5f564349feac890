"""TorchServe REST requests (``WireProtocol.TORCHSERVE_REST``) into the handler's inputs, exactly as
TorchServe decodes them: the frontend splits the body into named parameters and the Python worker
decodes each value by its content type (``ts/protocol/otf_message_handler._retrieve_input_data``).

- ``multipart/form-data``: one parameter per part. A file part (one with a filename) keeps its
  content type (``application/octet-stream`` when it has none); a plain field has none.
- ``application/x-www-form-urlencoded``: one parameter per field, no content type.
- anything else: one parameter ``body`` whose content type is the request's, parameters stripped.

Then, when ``decode_input_request`` is on (TorchServe's default): content type exactly
``application/json`` -> parsed JSON, ``text*`` -> str, otherwise (or when decoding fails) bytearray.
"""

import email.message
import email.utils
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from sluice.envelope import Job
from sluice.errors import ErrorCode, SluiceError

from sluice_worker.protocols.base import TsParameter

OCTET_STREAM = "application/octet-stream"
BAD_MULTIPART = "Invalid multipart/form-data request."


@dataclass(frozen=True, slots=True)
class Part:
    name: str
    content_type: str
    data: bytes


def header(headers: dict[str, str] | Any, name: str) -> str:
    """A header by case-insensitive name ("" when absent); HTTP headers arrive with their case as sent."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return str(value)
    return ""


def _param(value: str, header_name: str, param: str) -> str | None:
    message = email.message.Message()
    message[header_name] = value
    found = message.get_param(param, header=header_name)
    if found is None or isinstance(found, str):
        return found
    return str(email.utils.collapse_rfc2231_value(found))


def mime_type(content_type: str) -> str:
    """Netty's ``HttpUtil.getMimeType``: the value before any ``;``, trimmed, case kept."""
    return content_type.split(";", 1)[0].strip()


def decode_value(content_type: str, value: bytes, *, decode: bool) -> Any:
    if decode and content_type == "application/json":
        try:
            return json.loads(value.decode("utf-8"))
        except ValueError:
            return bytearray(value)
    if decode and content_type.startswith("text"):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return bytearray(value)
    return bytearray(value)


def _part(raw: bytes) -> Part | None:
    # ``raw`` runs from just after a delimiter to just before the CRLF of the next one.
    line_end = raw.find(b"\r\n")
    if line_end < 0:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, BAD_MULTIPART)
    head_end = raw.find(b"\r\n\r\n", line_end)
    if head_end < 0:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, BAD_MULTIPART)
    fields: dict[str, str] = {}
    for line in raw[line_end + 2 : head_end].split(b"\r\n"):
        key, sep, value = line.decode("utf-8", "replace").partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    disposition = fields.get("content-disposition", "")
    name = _param(disposition, "content-disposition", "name")
    if name is None:
        return None  # not a form field; Netty skips it too
    data = raw[head_end + 4 :]
    if _param(disposition, "content-disposition", "filename") is None:
        return Part(name, "", data)
    return Part(name, mime_type(fields.get("content-type", "")) or OCTET_STREAM, data)


def parse_multipart(body: bytes, content_type: str) -> list[Part]:
    boundary = _param(content_type, "content-type", "boundary")
    if not boundary:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, BAD_MULTIPART)
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    pieces = (b"\r\n" + body).split(delimiter)
    parts: list[Part] = []
    for piece in pieces[1:]:
        if piece.startswith(b"--"):  # the close delimiter
            return parts
        part = _part(piece)
        if part is not None:
            parts.append(part)
    raise SluiceError(ErrorCode.INVALID_ARGUMENT, BAD_MULTIPART)


def _parameters(body: bytes, content_type: str) -> list[tuple[str, str, bytes]]:
    mime = mime_type(content_type)
    if mime.lower() == "multipart/form-data":
        return [(part.name, part.content_type, part.data) for part in parse_multipart(body, content_type)]
    if mime.lower() == "application/x-www-form-urlencoded":
        # Latin-1 round trips every byte: percent-escapes come back as the exact bytes sent.
        fields = parse_qsl(body.decode("latin-1"), keep_blank_values=True, encoding="latin-1")
        return [(_utf8(key), "", value.encode("latin-1")) for key, value in fields]
    return [("body", mime, body)]


def _utf8(text: str) -> str:
    return text.encode("latin-1").decode("utf-8", "replace")


class TorchServeRest:
    """REST /predictions and /explanations: the body split and decoded as TorchServe does (unless
    ``decode_input_request`` is off); a result is sent as the handler serialized it."""

    def __init__(self, *, decode: bool) -> None:
        self._decode = decode

    def row(self, job: Job, request: bytes | memoryview) -> tuple[list[TsParameter], dict[str, str]]:
        return list(rest_parameters(job, bytes(request), decode=self._decode)), {}

    def payload(self, job: Job, body: bytes) -> bytes:
        return body

    def join(self, job: Job, bodies: list[bytes]) -> bytes:
        return b"".join(bodies)


def rest_parameters(job: Job, body: bytes | None = None, *, decode: bool = True) -> list[TsParameter]:
    """The handler inputs of a TorchServe REST job (its body: ``body``, else the job's request), in
    TorchServe's decoded form."""
    content_type = header(job.headers, "content-type")
    return [
        {"name": name, "contentType": ctype, "value": decode_value(ctype, value, decode=decode)}
        for name, ctype, value in _parameters(job.request if body is None else body, content_type)
    ]
