"""A streamed REST answer (``Transfer-Encoding: chunked``): the first reply's payload, then each later
one's, as they come. A failure after the head went out cannot become an error response: it breaks the
stream (:class:`sluice.transport.http_errors.StreamBroken`)."""

from collections.abc import AsyncIterator

from aiohttp import web
from sluice.envelope import Reply
from sluice.errors import SluiceError
from sluice.log import get_logger
from sluice.transport.http_errors import StreamBroken

log = get_logger(__name__)


async def relay(
    request: web.Request, response: web.StreamResponse, first: Reply, rest: AsyncIterator[Reply]
) -> web.StreamResponse:
    """Send ``response``'s head, ``first`` and every reply of ``rest`` as chunks."""
    await response.prepare(request)
    await response.write(first.payload)
    try:
        async for reply in rest:
            await response.write(reply.payload)
    except SluiceError as error:
        log.warning("stream failed after it started", error=error.message, code=error.code.value)
        raise StreamBroken(error.message) from error
    await response.write_eof()
    return response
