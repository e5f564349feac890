"""The manager's artifact endpoint: ``GET /artifacts/{model}/{version}`` answers the version's folder
as its artifact tar (sluice.registry.artifact), written on the fly from the unpacked folder (no second
copy on disk), for workers on hosts that do not see the manager's models folder (worker containers,
other machines). A worker checks what it received against the digest in the version record.

Listens on ``sluice_artifact_address`` (loopback by default; in compose, the stack's network) and
wants ``Authorization: Bearer <token>``, the token the first manager keeps in Redis
(:data:`sluice.redis.keys.ARTIFACT_TOKEN`): whoever may read Redis may fetch models, nobody else. The URL
workers use is advertised in Redis (:data:`sluice.redis.keys.ARTIFACT_URL`).
"""

import asyncio
import hmac
import secrets
import socket
from pathlib import Path

import redis.asyncio as aioredis
from aiohttp import web
from sluice.log import get_logger
from sluice.redis import keys
from sluice.registry import artifact as model_artifact
from sluice.registry import names
from sluice.registry import reader as registry
from sluice.transport.http_listener import HttpListener, ListenAddress, parse_address

log = get_logger(__name__)

ROUTE = "/artifacts/{model}/{version}"
DIGEST_HEADER = "X-Sluice-Artifact-Sha256"


async def artifact_token(redis: "aioredis.Redis") -> str:
    """The endpoint's bearer token, made by the first manager that asks."""
    await redis.set(keys.ARTIFACT_TOKEN, secrets.token_urlsafe(32), nx=True)
    raw = await redis.get(keys.ARTIFACT_TOKEN)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def advertised_url(address: ListenAddress, port: int, configured: str) -> str:
    """What workers are told to use: ``configured``, else this host's name for a wildcard listener,
    else the address itself."""
    if configured:
        return configured.rstrip("/")
    host = socket.gethostname() if address.host in ("0.0.0.0", "::", "") else address.host
    return f"http://{host}:{port}"


class _StreamWriter:
    """A file-like sink that hands tar bytes to the response from the writer thread."""

    def __init__(self, response: web.StreamResponse, loop: asyncio.AbstractEventLoop) -> None:
        self._response = response
        self._loop = loop

    def write(self, data: bytes) -> int:
        asyncio.run_coroutine_threadsafe(self._response.write(bytes(data)), self._loop).result()
        return len(data)


def create_app(redis: "aioredis.Redis", token: str) -> web.Application:
    async def artifact(request: web.Request) -> web.StreamResponse:
        if not _authorized(request.headers.get("Authorization", ""), token):
            raise web.HTTPUnauthorized(text="artifact token required")
        model, version = request.match_info["model"], request.match_info["version"]
        if not (names.is_valid(model) and names.is_valid(version)):
            raise web.HTTPNotFound(text="no such model version")
        record = await registry.get_version(redis, model, version)
        if record is None or not record.artifact_sha256:
            raise web.HTTPNotFound(text="no such model version")
        response = web.StreamResponse(headers={DIGEST_HEADER: record.artifact_sha256})
        response.content_type = "application/x-tar"
        await response.prepare(request)
        sink = _StreamWriter(response, asyncio.get_running_loop())
        try:
            await asyncio.to_thread(model_artifact.write_tar, Path(record.model_dir), sink)
        except FileNotFoundError:  # unregistered meanwhile: the worker's digest check fails
            log.warning("model folder gone while its artifact was sent", model=model, version=version)
        await response.write_eof()
        log.info("model artifact served", model=model, version=version, peer=request.remote)
        return response

    app = web.Application()
    app.router.add_get(ROUTE, artifact)
    return app


def _authorized(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class ArtifactServer:
    """The listener, and the URL it advertises in Redis."""

    def __init__(self, redis: "aioredis.Redis", address: str, advertise: str) -> None:
        self._redis = redis
        self._address = parse_address(address)
        self._advertise = advertise
        self._listener: HttpListener | None = None
        self.url = ""

    async def start(self) -> None:
        token = await artifact_token(self._redis)
        app = create_app(self._redis, token)
        self._listener = HttpListener(app, self._address, name="artifacts", cancel_on_disconnect=True)
        port = await self._listener.start()
        self.url = advertised_url(self._address, port, self._advertise)
        await self._redis.set(keys.ARTIFACT_URL, self.url)
        log.info("artifact endpoint listening", url=self.url)

    async def stop(self, grace_s: float) -> None:
        if self._listener is not None:
            await self._listener.stop(grace_s)
