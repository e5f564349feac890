"""Where and how Sluice's pipelined client connects (:class:`Endpoint`, read from a Redis URL), and the
opening of its connections."""

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from sluice.redis.resp import Arg
from sluice.redis.target import (
    ClusterTarget,
    SentinelTarget,
    is_cluster,
    is_sentinel,
    parse_cluster_url,
    parse_sentinel_url,
)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, from a ``redis://``, ``rediss://``, ``unix://`` or
    ``redis+sentinel://`` URL (then ``host`` and ``port`` are asked of the Sentinels per connection),
    or a ``redis+cluster://`` URL (then the connection goes to the first seed node that takes it: for
    what any node serves, such as pub/sub; :mod:`sluice.redis.cluster` routes keys)."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    sentinel: SentinelTarget | None = None
    cluster: ClusterTarget | None = None
    # One master of a Cluster, its slots routed by :mod:`sluice.redis.cluster`: an ``UNBLOCKED``
    # reply (a blocked read's key moved away) goes to that client to follow, the connection stays.
    cluster_node: bool = False

    @classmethod
    def from_url(cls, url: str) -> "Endpoint":
        """``redis://[[user]:password@]host[:port][/db]``, ``rediss://...``,
        ``unix://[[user]:password@]/path[?db=N]`` (redis-py's forms) or a Sentinel URL; ValueError if
        it is none."""
        if is_sentinel(url):
            target = parse_sentinel_url(url)
            return cls(db=target.db, username=target.username, password=target.password, sentinel=target)
        if is_cluster(url):
            nodes = parse_cluster_url(url)
            return cls(username=nodes.username, password=nodes.password, cluster=nodes)
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"not a Redis URL (redis://, rediss:// or unix://): {url!r}")
        query = parse_qs(parts.query)
        db_text = query["db"][0] if "db" in query else ""
        if parts.scheme != "unix" and parts.path.strip("/"):
            db_text = parts.path.strip("/")
        try:
            db = int(db_text or 0)
            port = parts.port or 6379
        except ValueError:
            raise ValueError(f"bad port or db in Redis URL {url!r}") from None
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=port,
            path=unquote(parts.path) if parts.scheme == "unix" else None,
            db=db,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            tls=parts.scheme == "rediss",
        )

    def handshake(self) -> list[tuple[Arg, ...]]:
        """Commands that prepare a new connection (their replies are checked, then dropped)."""
        commands: list[tuple[Arg, ...]] = []
        if self.password is not None:
            auth: tuple[Arg, ...] = ("AUTH", self.password)
            commands.append(auth if self.username is None else ("AUTH", self.username, self.password))
        if self.db:
            commands.append(("SELECT", self.db))
        if self.sentinel is not None:
            commands.append(("ROLE",))
        return commands


async def open_transport(
    loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, endpoint: Endpoint
) -> asyncio.Transport:
    """A connection to ``endpoint`` (its host and port, or its unix socket), TLS when it asks."""
    if endpoint.path is not None:
        transport, _ = await loop.create_unix_connection(lambda: protocol, endpoint.path)
    else:
        context = ssl.create_default_context() if endpoint.tls else None
        transport, _ = await loop.create_connection(
            lambda: protocol, endpoint.host, endpoint.port, ssl=context
        )
    return transport


async def open_any(
    loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, seeds: tuple[tuple[str, int], ...]
) -> asyncio.Transport:
    """A connection to the first of ``seeds`` that takes one; OSError naming each refusal."""
    reasons: list[str] = []
    for host, port in seeds:
        try:
            transport, _ = await loop.create_connection(lambda: protocol, host, port)
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc}")
            continue
        return transport
    raise OSError(f"no Redis Cluster node took a connection ({'; '.join(reasons)})")
