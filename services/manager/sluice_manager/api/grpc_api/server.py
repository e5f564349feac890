"""The management grpc.aio server on ``grpc_management_address:grpc_management_port`` (TorchServe's
127.0.0.1:7071): TorchServe's ``ManagementAPIsService`` and Sluice's ``SluiceManagementService``.
``interceptors`` is where token authorization goes."""

from collections.abc import Sequence
from typing import Any

import grpc
from sluice.transport.tls import TlsSettings, add_grpc_port

from sluice_manager.api.grpc_api import sluice_management
from sluice_manager.api.grpc_api.management import ManagementServicer, add_to_server
from sluice_manager.api.management import ManagementService


def bind_address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


class ManagementGrpcServer:
    def __init__(
        self,
        service: ManagementService,
        *,
        host: str,
        port: int,
        max_request_size: int,
        interceptors: Sequence[Any] = (),
        tls: TlsSettings | None = None,
    ) -> None:
        """``tls``: settings whose ``enable_grpc_ssl`` serves the port over TLS (None: plain text)."""
        self._server = grpc.aio.server(
            interceptors=list(interceptors),
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", max_request_size),
                ("grpc.max_send_message_length", -1),
            ],
        )
        add_to_server(self._server, ManagementServicer(service))
        sluice_management.add_to_server(self._server, sluice_management.SluiceManagementServicer(service))
        self._address = bind_address(host, port)
        self._tls = tls
        self.port = 0

    async def start(self) -> int:
        """Bind and serve; returns the bound port (RuntimeError if it cannot bind)."""
        if self._tls is None:
            self.port = self._server.add_insecure_port(self._address)
        else:
            self.port = add_grpc_port(self._server, self._address, self._tls)
        await self._server.start()
        return self.port

    async def stop(self, grace_s: float) -> None:
        await self._server.stop(grace_s)
