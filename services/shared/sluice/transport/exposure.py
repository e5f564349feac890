"""Warnings about where a listener is reachable from. Every listener binds 127.0.0.1 unless told
otherwise; anything else is logged, louder when bearer tokens would cross the network in clear text
(a listener without TLS: see :mod:`sluice.transport.tls`) or when no token is asked for at all."""

import ipaddress

from sluice.log import get_logger

log = get_logger(__name__)


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an IP, a name or a ``unix:`` socket) is reachable from this machine only."""
    host = host.strip().strip("[]")
    if host.startswith("unix:") or host.startswith("/"):
        return True
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        # A host name other than localhost, or "" / "0.0.0.0"-style wildcards: assume reachable.
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # a dual-stack socket's view of 127.0.0.1
    return address.is_loopback


def check_listener(
    service: str, listener: str, host: str, *, token_auth: bool | None, tls: bool = False
) -> bool:
    """Log a WARNING for a non-loopback bind; returns whether the bind is loopback-only.
    ``token_auth`` None: a listener that never asks for a token (metrics); ``tls``: it serves TLS."""
    if is_loopback_host(host):
        return True
    if token_auth is None:
        log.warning("listener is reachable from the network", service=service, listener=listener, host=host)
    elif not token_auth:
        log.warning(
            "listener is reachable from the network WITHOUT token authorization: anyone who reaches "
            "it can use it",
            service=service,
            listener=listener,
            host=host,
        )
    elif tls:
        log.info(
            "listener is reachable from the network over TLS", service=service, listener=listener, host=host
        )
    else:
        log.warning(
            "listener is reachable from the network without TLS: bearer tokens travel in clear text; "
            "serve TLS (certificate_file, private_key_file; https:// addresses, enable_grpc_ssl), put a "
            "TLS-terminating proxy in front, or bind 127.0.0.1",
            service=service,
            listener=listener,
            host=host,
        )
    return False
