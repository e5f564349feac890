"""Wiring and lifecycle of one gateway process.

Start: Redis clients, reply stream and reader, registry cache, the grpc.aio server, the REST
inference and metrics listeners. Stop (SIGTERM / SIGINT): health NOT_SERVING, gRPC ``server.stop(grace)``
and the REST listeners' drain let in-flight calls finish (the reply reader still runs), then the
background tasks stop, the reply stream is removed and Redis is closed.
"""

import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from sluice import __version__ as sluice_version
from sluice.log import get_logger
from sluice.redis import keys
from sluice.redis.control import COMMAND_TIMEOUT_S, ControlRedis
from sluice.redis.errors import RedisError
from sluice.redis.link import open_link
from sluice.tracing import start as start_tracing
from sluice.tracing import traced_calls, traced_requests
from sluice.transport.tls import add_grpc_port

from sluice_gateway.broker.redis_admission import RedisJobAdmission
from sluice_gateway.broker.redis_reader import RedisClusterReader
from sluice_gateway.broker.redis_regions import RedisRegions
from sluice_gateway.broker.redis_replies import RedisReplies
from sluice_gateway.broker.registry_events import RegistryEvents
from sluice_gateway.broker.replica_wait import ReplicaWait
from sluice_gateway.broker.reply_stream_keeper import ReplyStreamKeeper
from sluice_gateway.dataplane import DataPlane
from sluice_gateway.grpc_api.server import Readiness, add_reflection, create_server
from sluice_gateway.health import ModelHealth
from sluice_gateway.kserve import grpc as kserve_grpc
from sluice_gateway.kserve.service import KServeService
from sluice_gateway.kserve.shared_memory import SharedMemory
from sluice_gateway.metrics.inference import InferenceMetrics
from sluice_gateway.registry_cache import RegistryCache
from sluice_gateway.security import gateway_security, warn_exposure
from sluice_gateway.sequences import SequenceHeaders
from sluice_gateway.settings import GatewaySettings
from sluice_gateway.torchserve import grpc as torchserve_grpc
from sluice_gateway.workflows.service import Workflows

if TYPE_CHECKING:
    from sluice.tracing.otel import Tracing
    from sluice.transport.http_listener import HttpListener

log = get_logger(__name__)


class Gateway:
    def __init__(
        self,
        settings: GatewaySettings,
        *,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        rest_middlewares: Callable[[], Sequence[Any]] = tuple,
        tracing: "Tracing | None" = None,
    ) -> None:
        """``rest_middlewares`` is called when the REST listener starts (after gRPC serves);
        ``tracing``: jobs carry the current span's context (None: tracing is off)."""
        self.settings = settings
        self._interceptors = interceptors
        self._rest_middlewares = rest_middlewares
        self.port = 0
        self.rest_port = 0
        self.metrics_port = 0
        self.metrics = InferenceMetrics()
        # Registry reads, health, the reply-stream script and registry events. The hot path (enqueue,
        # cancel flags) and the blocking reply read get pipelined connections of their own.
        self.redis = ControlRedis(settings.redis_url)
        # The registry and the cluster state as the rest of the gateway reads them (broker.seam).
        self.cluster = RedisClusterReader(self.redis)
        self._hot_redis = open_link(settings.redis_url, name="enqueue")
        self._reader_redis = open_link(
            settings.redis_url, timeout_s=settings.reply_block_s + COMMAND_TIMEOUT_S, name="reply-reader"
        )
        self.reply_stream = keys.reply_stream(settings.gateway_id)
        self.replies = RedisReplies(
            self._reader_redis,
            self.reply_stream,
            block_s=settings.reply_block_s,
            count=settings.reply_read_count,
        )
        self.cache = RegistryCache(self.cluster, ttl_s=settings.registry_cache_ttl_s)
        self.events = RegistryEvents(self.redis, self.cache)
        self.admission = RedisJobAdmission(
            self._hot_redis,
            ReplicaWait(settings.redis_wait_replicas, settings.redis_wait_timeout_ms),
        )
        self.sequence_headers = SequenceHeaders(
            settings.header_key_sequence_id,
            settings.header_key_sequence_start,
            settings.header_key_sequence_end,
        )
        self.plane = DataPlane(
            self.cache,
            self.admission,
            self.replies,
            default_timeout_s=settings.default_request_timeout_s,
            stream_buffer_replies=settings.stream_buffer_replies,
            cancel_margin_s=settings.cancel_margin_s,
            observer=self.metrics,
            sequence_headers=self.sequence_headers,
            trace_context=tracing.outgoing if tracing is not None else None,
        )
        self.workflows = Workflows(self.plane, self.cache)
        # KServe v2, transport-agnostic: the gRPC servicer and the REST routes share it and its statistics.
        self.kserve = KServeService(
            self.plane,
            self.cache,
            self.cluster,
            self.workflows,
            gateway_ready=self._ready,
            version=sluice_version,
            shared_memory=SharedMemory(RedisRegions(self.redis), enabled=settings.system_shared_memory),
        )
        self.listeners: list[HttpListener] = []
        self.server: grpc.aio.Server | None = None
        self.readiness: Readiness | None = None
        self._keeper: ReplyStreamKeeper | None = None

    async def start(self) -> int:
        """Bind and start serving; returns the bound port."""
        settings = self.settings
        self.server = create_server(settings, self._interceptors)
        torchserve_grpc.add_to_server(
            self.server,
            torchserve_grpc.TorchServeInference(
                self.plane,
                ModelHealth(self.cluster),
                self.workflows,
                stream2_max_in_flight=settings.stream2_max_in_flight,
                max_request_size=settings.max_request_size,
                sequence_headers=self.sequence_headers,
            ),
        )
        kserve_grpc.add_to_server(
            self.server,
            kserve_grpc.KServeInference(
                self.kserve, stream_max_in_flight=settings.kserve_stream_max_in_flight
            ),
        )
        services = [torchserve_grpc.SERVICE_NAME, *kserve_grpc.SERVICE_NAMES]
        self.readiness = Readiness(
            self.server,
            services,
            self._ready,
            interval_s=settings.health_check_interval_s,
        )
        if settings.enable_reflection:
            # TorchServe's OIP name has no descriptor in our pool: reflection lists the standard name.
            add_reflection(self.server, [torchserve_grpc.SERVICE_NAME, kserve_grpc.SERVICE_NAME])
        self.port = add_grpc_port(self.server, settings.bind_address, settings)
        self._keeper = ReplyStreamKeeper(
            self.redis,
            self.replies,
            settings.gateway_id,
            ttl_s=settings.reply_stream_ttl_s,
            interval_s=settings.heartbeat_interval_s,
            alive_value=self._alive_value(),
        )
        try:
            await self._keeper.create()
        except RedisError as exc:  # the heartbeat creates it once Redis answers
            log.warning("Redis unreachable at startup", error=str(exc))
        await self.readiness.check_once()
        for component in (self.replies, self._keeper, self.events, self.readiness):
            component.start()
        await self.server.start()
        await self._start_http()
        log.info(
            "gateway listening",
            address=settings.grpc_inference_address,
            port=self.port,
            rest_port=self.rest_port,
            metrics_port=self.metrics_port,
            gateway_id=settings.gateway_id,
            reflection=settings.enable_reflection,
        )
        return self.port

    async def _start_http(self) -> None:
        # aiohttp loads here, once gRPC already serves: it is a large part of the start time.
        from sluice_gateway.rest_api.listeners import inference_listener, metrics_listener

        settings = self.settings
        rest = inference_listener(
            settings,
            self.plane,
            self.cache,
            ModelHealth(self.cluster),
            self.kserve,
            self.workflows,
            self.sequence_headers,
            self.metrics,
            self._rest_middlewares(),
        )
        self.listeners.append(rest)
        self.rest_port = await rest.start()
        if settings.enable_metrics_api:
            metrics = metrics_listener(settings, self.metrics, self.cluster)
            self.listeners.append(metrics)
            self.metrics_port = await metrics.start()

    async def stop(self, grace_s: float | None = None) -> None:
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        log.info("gateway draining", grace_s=grace, in_flight=self.replies.in_flight)
        if self.readiness is not None:
            await self.readiness.drain()
        grpc_stopped = self.server.stop(grace) if self.server is not None else asyncio.sleep(0)
        await asyncio.gather(grpc_stopped, *(listener.stop(grace) for listener in self.listeners))
        await self.admission.drain()
        await self.events.stop()
        if self._keeper is not None:
            await self._keeper.stop()
        await self.replies.stop()
        with contextlib.suppress(RedisError):
            await self.redis.delete(self.reply_stream, keys.gateway_alive(self.settings.gateway_id))
        await self.redis.aclose()
        await self._hot_redis.close()
        await self._reader_redis.close()
        log.info("gateway stopped")

    async def _ready(self) -> bool:
        """Redis answers and the reply stream exists (calls can be answered)."""
        timeout_s = max(self.settings.health_check_interval_s, 1.0)
        established = self._keeper is not None and self._keeper.established
        return established and await self.cluster.answers(timeout_s)

    def _alive_value(self) -> str:
        return json.dumps(
            {
                "gateway_id": self.settings.gateway_id,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "port": self.port,
            }
        )


async def serve(settings: GatewaySettings) -> None:
    """Run a gateway until SIGTERM or SIGINT, then shut it down gracefully. Tracing (when the OTEL_*
    variables ask for it) and token authorization (on unless disabled) are wired in here, through the
    interceptor and middleware seams: the tracing span is outermost, so refused calls are traced too."""
    security = gateway_security(settings)
    tracing = start_tracing("gateway")
    interceptors = [*traced_calls(tracing), *security.interceptors]

    def rest_middlewares() -> list[Any]:
        return [*traced_requests(tracing), *security.rest_middlewares()]

    gateway = Gateway(settings, interceptors=interceptors, rest_middlewares=rest_middlewares, tracing=tracing)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    warn_exposure(settings)
    await gateway.start()
    # What startup built lives as long as the process: keep it out of the collector's work.
    gc.freeze()
    await stop.wait()
    await gateway.stop()
    await security.aclose()
    if tracing is not None:
        tracing.shutdown()
