"""TLS as TorchServe configures it: ``certificate_file`` and ``private_key_file`` (PEM) serve the REST
ports whose address is ``https://host:port`` (``inference_address``, ``management_address``,
``metrics_address``), and with ``enable_grpc_ssl=true`` the gRPC ports too, with the same key and
certificate. A plain-text client of a TLS port fails its handshake.

:class:`TlsSettings` is the part of a service's settings that says so (the gateway's, the manager's,
the CLI's); :class:`TlsFiles` turns the files into what aiohttp and grpc serve with, and fails with a
message naming the file when it cannot.
"""

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from sluice.settings.common import CommonSettings
from sluice.typed import InvalidValue

if TYPE_CHECKING:
    # Imported where used: settings load before a gRPC service chooses grpc's poller, which must
    # happen before grpc loads (sluice.transport.grpc_poller).
    import grpc

# Browsers' and grpc's floor; TorchServe (Netty) serves TLS 1.2 and 1.3 as well.
MIN_VERSION = ssl.TLSVersion.TLSv1_2


class TlsError(ValueError):
    """A certificate or key that cannot be served; the message names the file."""


@dataclass(frozen=True)
class TlsFiles:
    certificate: Path
    private_key: Path

    def server_context(self, *, alpn: tuple[str, ...] = ("http/1.1",)) -> ssl.SSLContext:
        """An SSL context serving the certificate (REST listeners)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = MIN_VERSION
        try:
            context.load_cert_chain(self.certificate, self.private_key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(
                f"cannot serve TLS with certificate_file {self.certificate} and private_key_file "
                f"{self.private_key}: {exc}"
            ) from None
        context.set_alpn_protocols(list(alpn))
        return context

    def grpc_credentials(self) -> "grpc.ServerCredentials":
        """grpc's server credentials for the same pair (gRPC ports with ``enable_grpc_ssl``)."""
        import grpc

        self.server_context()  # the same checks and messages as the REST ports
        pair = (
            self._read(self.private_key, "private_key_file"),
            self._read(self.certificate, "certificate_file"),
        )
        return grpc.ssl_server_credentials([pair])

    @staticmethod
    def _read(path: Path, key: str) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise TlsError(f"cannot read {key} {path}: {exc.strerror}") from None


@dataclass(init=False, kw_only=True)
class TlsSettings(CommonSettings):
    TS_KEYS: ClassVar[dict[str, str]] = {
        **CommonSettings.TS_KEYS,
        "certificate_file": "certificate_file",
        "private_key_file": "private_key_file",
        "enable_grpc_ssl": "enable_grpc_ssl",
    }

    # PEM certificate (chain) and its private key; TorchServe's keys.
    certificate_file: Path | None = None
    private_key_file: Path | None = None
    # Serve the gRPC ports over TLS with them.
    enable_grpc_ssl: bool = False

    @property
    def tls_files(self) -> TlsFiles | None:
        if self.certificate_file is None or self.private_key_file is None:
            return None
        return TlsFiles(self.certificate_file, self.private_key_file)

    def check(self) -> None:
        super().check()
        if (self.certificate_file is None) != (self.private_key_file is None):
            raise InvalidValue("", "certificate_file and private_key_file go together: set both or neither")
        if self.enable_grpc_ssl and self.tls_files is None:
            raise InvalidValue("enable_grpc_ssl", "needs certificate_file and private_key_file")


def rest_context(settings: TlsSettings, address: str) -> ssl.SSLContext | None:
    """The SSL context for a REST listener on ``address``: its certificate when it is ``https://``
    (None otherwise, or without files: the listener then refuses to start, naming the keys)."""
    files = settings.tls_files
    if not address.startswith("https://") or files is None:
        return None
    return files.server_context()


def add_grpc_port(server: "grpc.aio.Server", address: str, settings: TlsSettings) -> int:
    """Bind ``address`` on ``server``: over TLS with ``enable_grpc_ssl``, else in plain text."""
    files = settings.tls_files
    if settings.enable_grpc_ssl and files is not None:
        return server.add_secure_port(address, files.grpc_credentials())
    return server.add_insecure_port(address)
