"""The grpc.aio server: options, ``grpc.health.v1`` (readiness follows Redis), optional reflection."""

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from sluice.lifecycle.cancellation import cancel_and_wait
from sluice.log import get_logger

from sluice_gateway.settings import GatewaySettings

log = get_logger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def create_server(
    settings: GatewaySettings, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
) -> grpc.aio.Server:
    """A grpc.aio server; ``interceptors`` is where an auth interceptor goes."""
    return grpc.aio.server(
        interceptors=list(interceptors),
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", settings.grpc_max_receive_size),
            ("grpc.max_send_message_length", -1),
        ],
        maximum_concurrent_rpcs=settings.maximum_concurrent_rpcs,
    )


def add_reflection(server: grpc.aio.Server, service_names: Sequence[str]) -> None:
    # Imported only when reflection is on (it is off by default): ~1 MiB of the gateway's memory.
    from grpc_reflection.v1alpha import reflection

    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )


class Readiness:
    """``grpc.health.v1``: SERVING while Redis answers, NOT_SERVING while it does not or while draining.

    The overall status ("") and each listed service follow the same probe."""

    def __init__(
        self,
        server: grpc.aio.Server,
        service_names: Sequence[str],
        probe: Callable[[], Awaitable[bool]],
        *,
        interval_s: float,
    ) -> None:
        self.servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)
        self._services = ("", *service_names)
        self._probe = probe
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.serving: bool | None = None

    async def check_once(self) -> bool:
        serving = await self._probe()
        if serving != self.serving:
            log.info("health changed", serving=serving)
            self.serving = serving
            for service in self._services:
                await self.servicer.set(service, SERVING if serving else NOT_SERVING)
        return serving

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="readiness")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check_once()
            except Exception:
                log.exception("health probe error")

    async def drain(self) -> None:
        """NOT_SERVING for good (graceful shutdown)."""
        await self.stop()
        self.serving = False
        await self.servicer.enter_graceful_shutdown()

    async def stop(self) -> None:
        if self._task is not None:
            # Cancel until the task is done, even if a probe swallowed one cancellation.
            await cancel_and_wait(self._task)
            self._task = None
