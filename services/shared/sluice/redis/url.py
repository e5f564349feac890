"""Redis URLs as logs and terminals may show them: the password (``redis://:pw@host``, the
``password=`` query parameter of a ``unix://`` URL, a Sentinel URL's ``sentinel_password=``) replaced by
``***``, everything else kept."""

from urllib.parse import urlsplit

MASK = "***"


def redacted(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return MASK  # unparseable: it might hold anything
    netloc = parts.netloc
    if password is not None:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    query = "&".join(_masked(pair) for pair in parts.query.split("&"))
    # Built by hand: urlunsplit drops the "//" of a unix:// URL without a host.
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return f"{shown}?{query}" if query else shown


def _masked(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    return f"{name}={MASK}" if equals and name.endswith("password") else pair
