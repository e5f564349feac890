"""Which model URLs the manager may fetch (TorchServe's ``allowed_urls``), as pure checks.

Registering a model from a URL makes the server fetch it (and later run its code), so an open URL
policy is both an SSRF and a code-execution hole (ShellTorch, CVE-2023-43654; CVE-2024-35198). The
rules, each checked before any connection is made:

- ``allowed_urls`` is **empty by default**: no remote URL at all (TorchServe allows every URL).
- When set: comma-separated regexes, each matched against the whole URL (case-insensitive, as in
  TorchServe). https only, unless the matching pattern itself starts with ``http`` (``http://...``,
  ``http(s)?://...``) or ``file`` (``file:///srv/models/.*``).
- Refused whatever the patterns say: ``..`` anywhere (also percent-encoded), credentials in the URL
  (``user@host``), backslashes, control characters and whitespace, a host that two URL parsers read
  differently. A non-default port needs a pattern that spells it (``:8443``).
- The host's addresses (the IP literal, or every address its name resolves to, checked again when
  the connection is made) must be public: loopback, link-local (169.254/16, e.g. cloud metadata),
  private (RFC 1918), unique-local (fc00::/7), CGNAT, multicast and reserved ranges are refused
  unless listed in ``sluice_allowed_url_networks`` (CIDRs).
"""

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import yarl
from sluice.errors import ErrorCode, SluiceError

from sluice_manager.models.archives import printable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

GIB = 1024**3
MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def is_url(text: str) -> bool:
    """Whether a model ``url`` names a remote (or ``file://``) URL rather than a model-store entry."""
    return _SCHEME.match(text) is not None


@dataclass(frozen=True)
class UrlPolicy:
    patterns: tuple[re.Pattern[str], ...] = ()
    allowed_networks: tuple[IPNetwork, ...] = ()
    max_bytes: int = 16 * GIB
    # Whole download (all redirects included), connecting, and the longest wait for the next bytes.
    timeout_s: float = 1800.0
    connect_timeout_s: float = 10.0
    read_idle_timeout_s: float = 60.0
    max_redirects: int = 5

    @classmethod
    def parse(cls, allowed_urls: str, allowed_networks: str = "", **limits: float) -> "UrlPolicy":
        """From the settings' text; raises ValueError on a bad regex or CIDR."""
        patterns: list[re.Pattern[str]] = []
        for text in (part.strip() for part in allowed_urls.split(",")):
            if text:
                try:
                    patterns.append(re.compile(text, re.IGNORECASE))
                except re.error as exc:
                    raise ValueError(f"allowed_urls: invalid pattern {text!r}: {exc}") from None
        networks: list[IPNetwork] = []
        for text in (part.strip() for part in allowed_networks.split(",")):
            if text:
                try:
                    networks.append(ipaddress.ip_network(text, strict=False))
                except ValueError as exc:
                    raise ValueError(f"sluice_allowed_url_networks: {exc}") from None
        return cls(tuple(patterns), tuple(networks), **limits)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CheckedUrl:
    """A URL that passed every check that needs no network."""

    raw: str
    url: yarl.URL
    scheme: str
    host: str


def shown(url: str) -> str:
    """A URL as messages and logs show it: no credentials, no query (it may hold a signature)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
        text = f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else url
    except ValueError:
        text = url
    return printable(text, 200)


def not_allowed(url: str, reason: str) -> SluiceError:
    """TorchServe's refusal (ModelNotFoundException: REST 404, gRPC NOT_FOUND), with the reason."""
    return SluiceError(
        ErrorCode.MODEL_NOT_FOUND, f"Given URL {shown(url)} does not match any allowed URL(s) ({reason})"
    )


def check_url(raw: str, policy: UrlPolicy) -> CheckedUrl:
    """Every check that needs no network; raises a client-safe :class:`SluiceError`."""
    _check_text(raw)
    if ".." in raw or ".." in _decoded(raw):
        raise SluiceError(ErrorCode.MODEL_NOT_FOUND, f"Relative path is not allowed in url: {shown(raw)}")
    try:
        url = yarl.URL(raw)
        split = urlsplit(raw)
        split_host = (split.hostname or "").rstrip(".")
        split_port = split.port
    except ValueError:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid model url: {shown(raw)}") from None
    scheme = (url.scheme or "").lower()
    if url.user is not None or url.password is not None or "@" in (split.netloc or ""):
        raise not_allowed(raw, "credentials in the URL are not allowed")
    if scheme not in ("https", "http", "file"):
        raise not_allowed(raw, "only https, http and file URLs can be allowed")
    host = (url.host or "").rstrip(".").lower()
    same_host = host == split_host.lower() or (
        _ip_literal(host) is not None and _ip_literal(host) == _ip_literal(split_host)
    )
    same_authority = split_host.isascii() and same_host and url.explicit_port == split_port
    if scheme != "file" and not (host and same_authority):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid model url: {shown(raw)}")
    if scheme == "file" and host not in ("", "localhost"):
        raise not_allowed(raw, "a file URL cannot name a host")
    pattern = _matching_pattern(raw, scheme, policy)
    port = url.explicit_port
    if port is not None and port != DEFAULT_PORTS.get(scheme) and f":{port}" not in pattern.pattern:
        raise not_allowed(raw, f"port {port} is not spelled out by the matching pattern")
    literal = _ip_literal(host)
    if literal is not None and not address_allowed(literal, policy):
        raise not_allowed(raw, "the address is not public; see sluice_allowed_url_networks")
    return CheckedUrl(raw, url, scheme, host)


def _check_text(raw: str) -> None:
    if not raw or len(raw) > MAX_URL_LENGTH or "\\" in raw:
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid model url: {shown(raw)}")
    if any(ch.isspace() or not ch.isprintable() for ch in raw):
        raise SluiceError(ErrorCode.INVALID_ARGUMENT, f"Invalid model url: {shown(raw)}")


def _decoded(raw: str) -> str:
    """``raw`` percent-decoded until it stops changing (``%252e`` is ``%2e`` is ``.``)."""
    for _ in range(4):
        decoded = unquote(raw)
        if decoded == raw:
            break
        raw = decoded
    return raw


def _matching_pattern(raw: str, scheme: str, policy: UrlPolicy) -> re.Pattern[str]:
    if not policy.patterns:
        raise not_allowed(raw, "allowed_urls is empty: remote model URLs are off")
    for pattern in policy.patterns:
        if pattern.fullmatch(raw) and (scheme == "https" or _lists_scheme(pattern, scheme)):
            return pattern
    if any(pattern.fullmatch(raw) for pattern in policy.patterns):
        raise not_allowed(raw, f"{scheme} URLs need a pattern that starts with {scheme}")
    raise not_allowed(raw, "no allowed_urls pattern matches it")


def _lists_scheme(pattern: re.Pattern[str], scheme: str) -> bool:
    return pattern.pattern.lstrip("^").lower().startswith(scheme)


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def address_allowed(address: IPAddress, policy: UrlPolicy) -> bool:
    """Public addresses, and those the operator allow-listed."""
    if any(address in network for network in policy.allowed_networks):
        return True
    for embedded in _embedded_ipv4(address):
        if not address_allowed(embedded, policy):
            return False
    return address.is_global and not address.is_multicast


def _embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address reaches (mapped, 6to4, Teredo client, NAT64)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        found.append(address.teredo[1])
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found
