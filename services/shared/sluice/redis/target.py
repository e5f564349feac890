"""Which Redis a service talks to, as one URL that every process can be handed (``SLUICE_REDIS_URL``):
a Redis itself (``redis://``, ``rediss://``, ``unix://``) or a master found through Redis Sentinel.

A Sentinel URL (the ``redis+sentinel`` form other Redis tools use)::

    redis+sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/<db>][?sentinel_password=...]

The password authenticates to the master (and its replicas); Sentinels are asked without one unless
``sentinel_password`` is given. Settings build it from ``sluice_redis_sentinels``,
``sluice_redis_sentinel_master`` and ``sluice_redis_password`` (:func:`effective_url`).
"""

from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379


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


def is_sentinel(url: str) -> bool:
    return url.startswith(f"{SENTINEL_SCHEME}://")


def parse_sentinels(listed: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (port 26379 when left out); ValueError naming a bad entry."""
    found: list[tuple[str, int]] = []
    for entry in (part.strip() for part in listed.split(",")):
        if not entry:
            continue
        host, colon, port_text = entry.rpartition(":")
        if not colon:
            host, port_text = entry, str(DEFAULT_SENTINEL_PORT)
        host = host.strip("[]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"not a Sentinel address (host:port): {entry!r}")
        found.append((host, int(port_text)))
    if not found:
        raise ValueError("no Sentinel address given")
    return tuple(found)


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


def sentinel_url(sentinels: str, master: str, *, password: str = "", sentinel_password: str = "") -> str:
    """The ``redis+sentinel://`` URL for settings' values; ValueError naming a bad Sentinel address."""
    hosts = ",".join(f"{host}:{port}" for host, port in parse_sentinels(sentinels))
    credentials = f":{quote(password, safe='')}@" if password else ""
    query = f"?sentinel_password={quote(sentinel_password, safe='')}" if sentinel_password else ""
    return f"{SENTINEL_SCHEME}://{credentials}{hosts}/{quote(master, safe='')}/0{query}"


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in it, unless it already has one (``redis://`` / ``rediss://``)."""
    parts = urlsplit(url)
    if not password or parts.password is not None or parts.scheme not in ("redis", "rediss"):
        return url
    return url.replace(f"{parts.scheme}://", f"{parts.scheme}://:{quote(password, safe='')}@", 1)


def effective_url(url: str, *, sentinels: str, master: str, password: str, sentinel_password: str) -> str:
    """The URL the settings mean: Sentinels, when listed, win over ``url``; ``password`` goes into a
    plain URL that has none."""
    if sentinels:
        if not master:
            raise ValueError("sluice_redis_sentinels needs sluice_redis_sentinel_master (the master's name)")
        return sentinel_url(sentinels, master, password=password, sentinel_password=sentinel_password)
    return with_password(url, password)
