"""TorchServe's listen addresses (``inference_address``, ``metrics_address``): ``http://host:port``
or ``unix:/path``. Port 0 binds a free port (tests)."""

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str = ""
    port: int = 0
    unix_path: str = ""

    def __str__(self) -> str:
        return f"unix:{self.unix_path}" if self.unix_path else f"http://{self.host}:{self.port}"


def parse_address(address: str) -> ListenAddress:
    """``http://127.0.0.1:8080`` -> host and port; ``unix:/tmp/s.sock`` -> a Unix socket path.
    HTTPS addresses are refused: TLS is terminated in front of Sluice (see README)."""
    if address.startswith("unix:"):
        path = address[len("unix:") :]
        if not path:
            raise ValueError(f"no socket path in {address!r}")
        return ListenAddress(unix_path=path)
    parts = urlsplit(address)
    if parts.scheme != "http":
        raise ValueError(f"unsupported address {address!r}: use http://host:port or unix:/path")
    if parts.hostname is None:
        raise ValueError(f"no host in {address!r}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port in {address!r}") from exc
    return ListenAddress(host=parts.hostname, port=80 if port is None else port)
