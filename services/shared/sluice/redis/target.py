"""Which Redis a service talks to, as one URL that every process can be handed (``SLUICE_REDIS_URL``):
a Redis itself (``redis://``, ``rediss://``, ``unix://``), a master found through Redis Sentinel, or a
Redis Cluster known by some of its nodes.

A Sentinel URL (the ``redis+sentinel`` form other Redis tools use)::

    redis+sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/<db>][?sentinel_password=...]

The password authenticates to the master (and its replicas); Sentinels are asked without one unless
``sentinel_password`` is given. Settings build it from ``sluice_redis_sentinels``,
``sluice_redis_sentinel_master`` and ``sluice_redis_password`` (:func:`effective_url`).

A Cluster URL names seed nodes; the clients learn every master and its slots from them::

    redis+cluster://[[user]:password@]host:port[,host:port...]

Settings build it from ``sluice_redis_cluster`` and ``sluice_redis_password``.
"""

from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_REDIS_PORT = 6379


@dataclass(frozen=True)
class SentinelTarget:
    """A master known by name to a set of Sentinels."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def describe(self) -> str:
        """The Sentinels and the master's name, for messages (no password)."""
        return f"master {self.master!r} of Sentinels {', '.join(f'{h}:{p}' for h, p in self.sentinels)}"


@dataclass(frozen=True)
class ClusterTarget:
    """A Redis Cluster, known by some of its nodes (any of them tells where every slot lives)."""

    seeds: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None

    def describe(self) -> str:
        """The seed nodes, for messages (no password)."""
        return f"Redis Cluster nodes {', '.join(f'{h}:{p}' for h, p in self.seeds)}"


def is_sentinel(url: str) -> bool:
    return url.startswith(f"{SENTINEL_SCHEME}://")


def is_cluster(url: str) -> bool:
    return url.startswith(f"{CLUSTER_SCHEME}://")


def is_shared(url: str) -> bool:
    """Whether ``url`` names Redis servers run by others (Sentinels or a Cluster), not one Redis."""
    return is_sentinel(url) or is_cluster(url)


def parse_addresses(
    listed: str, *, what: str = "Sentinel", default_port: int = DEFAULT_SENTINEL_PORT
) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (``default_port`` when left out); ValueError naming a bad entry."""
    found: list[tuple[str, int]] = []
    for entry in (part.strip() for part in listed.split(",")):
        if not entry:
            continue
        host, colon, port_text = entry.rpartition(":")
        if not colon:
            host, port_text = entry, str(default_port)
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"not a {what} address (host:port): {entry!r}")
        found.append((host, int(port_text)))
    if not found:
        raise ValueError(f"no {what} address given")
    return tuple(found)


def parse_sentinels(listed: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (port 26379 when left out); ValueError naming a bad entry."""
    return parse_addresses(listed)


def parse_cluster_nodes(listed: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (port 6379 when left out); ValueError naming a bad entry."""
    return parse_addresses(listed, what="Redis Cluster node", default_port=DEFAULT_REDIS_PORT)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The target of a ``redis+sentinel://`` URL; ValueError if it is not a valid one."""
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise ValueError(f"not a Redis Sentinel URL ({SENTINEL_SCHEME}://): {url!r}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if at else ("", "", "")
    path = [segment for segment in parts.path.split("/") if segment]
    if not path:
        raise ValueError(f"a Redis Sentinel URL names its master: {SENTINEL_SCHEME}://host:port/<master>")
    if len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError(f"bad path in Redis Sentinel URL (/<master>[/<db>]): {parts.path!r}")
    query = parse_qs(parts.query)
    return SentinelTarget(
        sentinels=parse_sentinels(hosts),
        master=unquote(path[0]),
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) if at and password else None,
        sentinel_password=query["sentinel_password"][0] if "sentinel_password" in query else None,
    )


def parse_cluster_url(url: str) -> ClusterTarget:
    """The target of a ``redis+cluster://`` URL; ValueError if it is not a valid one."""
    parts = urlsplit(url)
    if parts.scheme != CLUSTER_SCHEME:
        raise ValueError(f"not a Redis Cluster URL ({CLUSTER_SCHEME}://): {url!r}")
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(f"a Redis Cluster has only database 0: {parts.path!r}")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":") if at else ("", "", "")
    return ClusterTarget(
        seeds=parse_cluster_nodes(hosts),
        username=unquote(username) or None,
        password=unquote(password) if at and password else None,
    )


def cluster_url(nodes: str, *, password: str = "") -> str:
    """The ``redis+cluster://`` URL for settings' values; ValueError naming a bad node address."""
    hosts = ",".join(f"{host}:{port}" for host, port in parse_cluster_nodes(nodes))
    credentials = f":{quote(password, safe='')}@" if password else ""
    return f"{CLUSTER_SCHEME}://{credentials}{hosts}"


def sentinel_url(sentinels: str, master: str, *, password: str = "", sentinel_password: str = "") -> str:
    """The ``redis+sentinel://`` URL for settings' values; ValueError naming a bad Sentinel address."""
    hosts = ",".join(f"{host}:{port}" for host, port in parse_sentinels(sentinels))
    credentials = f":{quote(password, safe='')}@" if password else ""
    query = f"?sentinel_password={quote(sentinel_password, safe='')}" if sentinel_password else ""
    return f"{SENTINEL_SCHEME}://{credentials}{hosts}/{quote(master, safe='')}/0{query}"


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in it, unless it already has one (``redis://`` / ``rediss://``)."""
    parts = urlsplit(url)
    if not password or parts.password is not None or parts.scheme not in ("redis", "rediss", CLUSTER_SCHEME):
        return url
    return url.replace(f"{parts.scheme}://", f"{parts.scheme}://:{quote(password, safe='')}@", 1)


def effective_url(
    url: str, *, sentinels: str, master: str, password: str, sentinel_password: str, cluster: str = ""
) -> str:
    """The URL the settings mean: a Cluster's nodes or Sentinels, when listed, win over ``url`` (not
    both); ``password`` goes into a plain URL that has none."""
    if cluster and sentinels:
        raise ValueError("set sluice_redis_cluster or sluice_redis_sentinels, not both")
    if cluster:
        return cluster_url(cluster, password=password)
    if sentinels:
        if not master:
            raise ValueError("sluice_redis_sentinels needs sluice_redis_sentinel_master (the master's name)")
        return sentinel_url(sentinels, master, password=password, sentinel_password=sentinel_password)
    return with_password(url, password)
