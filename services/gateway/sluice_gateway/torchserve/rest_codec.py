"""TorchServe REST requests <-> the data plane. The gateway forwards the body undecoded with the HTTP
headers (as sent); the worker decodes it the way TorchServe's worker does (JSON, text, form data,
multipart). Replies carry the raw body and the handler's status, phrase, content type and headers."""

from aiohttp import hdrs, web
from sluice.envelope import Reply, WireProtocol
from sluice.torchserve_http import NO_CONTENT_TYPE

from sluice_gateway.dataplane import InferenceCall

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
    protocol: "WireProtocol.ValueType" = WireProtocol.TORCHSERVE_REST,
) -> InferenceCall:
    headers = request_headers(request)
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
    )


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
