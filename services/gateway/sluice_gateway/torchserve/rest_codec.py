"""TorchServe REST requests <-> the data plane. The gateway forwards the body undecoded with the HTTP
headers (as sent); the worker decodes it the way TorchServe's worker does (JSON, text, form data,
multipart). Replies carry the raw body and the handler's status, phrase, content type and headers.

A request joins a sequence with the ``ts_request_sequence_id`` header (the names are TorchServe's
``ts_header_key_sequence_*`` settings); a stateful model's request without it starts a new sequence
``ts-seq-<uuid>``, as TorchServe does."""

from aiohttp import hdrs, web
from sluice.envelope import Reply, WireProtocol
from sluice.transport.torchserve_http import NO_CONTENT_TYPE

from sluice_gateway.broker.seam import SequenceStep
from sluice_gateway.dataplane import InferenceCall
from sluice_gateway.sequences import TRUE, SequenceHeaders

# Handler headers TorchServe's frontend adds to every /predictions and /explanations request.
URL_PATH_HEADER = "url_path"
EXPLAIN_HEADER = "explain"


def request_headers(request: web.Request) -> dict[str, str]:
    """HTTP headers with their case as sent (the last of repeated names wins, as in TorchServe).
    Decoded as ISO-8859-1, the charset HTTP header bytes are read with on the JVM too."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in request.raw_headers}


def to_call(
    request: web.Request,
    body: bytes,
    *,
    model: str,
    version: str,
    explain: bool,
    url_path: str | None,
    names: SequenceHeaders,
    protocol: "WireProtocol.ValueType" = WireProtocol.TORCHSERVE_REST,
) -> InferenceCall:
    headers = request_headers(request)
    step = sequence_step(headers, names)
    if url_path is not None:
        headers[URL_PATH_HEADER] = url_path
    headers[EXPLAIN_HEADER] = "True" if explain else "False"
    return InferenceCall(
        protocol=protocol,
        model=model,
        version=version,
        request=body,
        headers=headers,
        # The handler decides whether it streams: the job stays batchable, every reply is read.
        stream_in_batch=True,
        sequence=step,
        missing_sequence=None,
    )


def sequence_step(headers: dict[str, str], names: SequenceHeaders) -> SequenceStep | None:
    """The sequence the request names, None when it names none. Header names match whatever their
    case (HTTP's rule); a start or end header counts when it says ``true``."""
    sequence_id = _header(headers, names.id)
    if not sequence_id:
        return None
    return SequenceStep(
        sequence_id,
        start=True if _header(headers, names.start).strip().lower() == TRUE else None,
        end=_header(headers, names.end).strip().lower() == TRUE,
    )


def _header(headers: dict[str, str], name: str) -> str:
    """The value of ``name`` (the last one sent, whatever its case), "" when it is absent."""
    wanted = name.lower()
    return next((value for key, value in reversed(headers.items()) if key.lower() == wanted), "")


def _apply(response: web.StreamResponse, reply: Reply) -> None:
    if reply.content_type:
        response.headers[hdrs.CONTENT_TYPE] = reply.content_type
    else:
        response[NO_CONTENT_TYPE] = True
    for name, value in reply.headers.items():
        response.headers[name] = value


def full_response(reply: Reply) -> web.Response:
    """A complete response: the handler's status line (``HTTP/1.1 200 `` with an empty phrase
    unless it set one, as TorchServe sends), content type, headers and body."""
    response = web.Response(body=reply.payload, status=reply.status_code or 200, reason=reply.reason_phrase)
    _apply(response, reply)
    return response


def stream_response(first: Reply) -> web.StreamResponse:
    """The head of a streamed (chunked) response, from the first intermediate reply: its status and
    headers, ``ts_stream_next: true`` among them."""
    response = web.StreamResponse(status=first.status_code or 200, reason=first.reason_phrase)
    _apply(response, first)
    response.enable_chunked_encoding()
    return response
