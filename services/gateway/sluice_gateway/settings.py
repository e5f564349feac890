"""The gateway's settings: built once in ``__main__`` and passed down."""

import secrets
from dataclasses import dataclass, field
from typing import Annotated, ClassVar

from sluice.auth.settings import AuthSettings
from sluice.transport.tls import TlsSettings
from sluice.typed import (
    Bounds,
    InvalidValue,
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
)

# Gateway ids end up inside Redis keys ({gw:<id>}), so they use a key-safe alphabet.
GATEWAY_ID_PATTERN = r"^[A-Za-z0-9_\-.]{1,64}$"


def _random_gateway_id() -> str:
    return secrets.token_hex(6)


@dataclass(init=False, kw_only=True)
class GatewaySettings(AuthSettings, TlsSettings):
    """Token authorization (on by default) comes from :class:`AuthSettings`."""

    TS_KEYS: ClassVar[dict[str, str]] = {
        **AuthSettings.TS_KEYS,
        **TlsSettings.TS_KEYS,
        "grpc_inference_address": "grpc_inference_address",
        "grpc_inference_port": "grpc_inference_port",
        "max_request_size": "max_request_size",
        "inference_address": "inference_address",
        "metrics_address": "metrics_address",
        "enable_metrics_api": "enable_metrics_api",
        "ts_header_key_sequence_id": "header_key_sequence_id",
        "ts_header_key_sequence_start": "header_key_sequence_start",
        "ts_header_key_sequence_end": "header_key_sequence_end",
        "sluice_redis_wait_replicas": "redis_wait_replicas",
        "sluice_redis_wait_timeout_ms": "redis_wait_timeout_ms",
        "sluice_system_shared_memory": "system_shared_memory",
    }

    # TorchServe's keys and defaults.
    grpc_inference_address: str = "127.0.0.1"
    # The handler headers (and REST request headers) that carry a sequence: id, start, end.
    header_key_sequence_id: str = "ts_request_sequence_id"
    header_key_sequence_start: str = "ts_request_sequence_start"
    header_key_sequence_end: str = "ts_request_sequence_end"
    grpc_inference_port: Port = 7070
    # Largest inbound message (grpc.max_receive_message_length, REST body), TorchServe's default.
    max_request_size: PositiveInt = 6553500
    # Largest inbound KServe v2 gRPC message (ModelInfer and the streaming rpcs). The port's gRPC limit is
    # the larger of the two; TorchServe's rpcs still refuse requests over max_request_size.
    kserve_max_request_size: PositiveInt = 64 * 1024 * 1024
    # Requests of one ModelStreamInfer call awaiting replies; more requests wait (flow control).
    kserve_stream_max_in_flight: PositiveInt = 256
    # The KServe v2 / Triton system shared-memory extension (kserve/shared_memory.py): off, since a
    # client that registers a key reads and writes that object with the server's rights.
    system_shared_memory: bool = False
    # REST inference API (TorchServe routes and KServe v2 REST) and Prometheus metrics:
    # http://host:port or unix:/path.
    inference_address: str = "http://127.0.0.1:8080"
    metrics_address: str = "http://127.0.0.1:8082"
    enable_metrics_api: bool = True

    # Names this gateway's reply stream; random per process so restarts never share a stream.
    gateway_id: Annotated[str, Bounds(pattern=GATEWAY_ID_PATTERN)] = field(default_factory=_random_gateway_id)
    enable_reflection: bool = False
    # Calls beyond this are rejected with RESOURCE_EXHAUSTED by grpc itself (a deliberate ceiling:
    # past a few thousand concurrent calls grpc.aio starts cancelling calls on its own).
    maximum_concurrent_rpcs: PositiveInt = 10000
    # How long a call without a client deadline waits for its reply; None: the version's
    # response_timeout_s.
    default_request_timeout_s: PositiveFloat | None = None
    # In-flight calls get this long to finish after SIGTERM.
    shutdown_grace_s: NonNegativeFloat = 30.0

    # Reply stream: heartbeat period (TTL refresh and vanish check), TTL, blocking read and batch size.
    heartbeat_interval_s: PositiveFloat = 1.0
    reply_stream_ttl_s: PositiveFloat = 30.0
    reply_block_s: PositiveFloat = 2.0
    reply_read_count: PositiveInt = 512
    # Replies buffered per streaming call before a call that is not read fast enough is failed.
    stream_buffer_replies: PositiveInt = 1024
    # Jobs of one StreamPredictions2 call awaiting replies; more requests wait (flow control).
    stream2_max_in_flight: PositiveInt = 256

    health_check_interval_s: PositiveFloat = 1.0
    # Safety net behind pub/sub invalidation (pub/sub is at-most-once).
    registry_cache_ttl_s: PositiveFloat = 5.0
    # Cancel flags outlive the job's deadline by this much.
    cancel_margin_s: PositiveFloat = 60.0
    # Redis WAIT after each enqueue: a job is admitted once this many replicas have it, or once the
    # timeout passed (then it is admitted all the same, and logged). 0: no WAIT. See docs/failover.md.
    redis_wait_replicas: NonNegativeInt = 0
    redis_wait_timeout_ms: PositiveInt = 100

    def check(self) -> None:
        super().check()
        if self.redis_wait_replicas and self.on_redis_cluster:
            # WAIT covers one connection's writes: on a Cluster the jobs go to many masters.
            raise InvalidValue(
                "sluice_redis_wait_replicas",
                "WAIT is not offered on a Redis Cluster; set min-replicas-to-write on its masters instead",
            )

    @property
    def grpc_max_receive_size(self) -> int:
        """The inference port's gRPC receive limit (one limit per server; see kserve_max_request_size)."""
        return max(self.max_request_size, self.kserve_max_request_size)

    @property
    def bind_address(self) -> str:
        host = self.grpc_inference_address
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.grpc_inference_port}"
