"""OpenTelemetry traces across Sluice's hops: the gateway's call, the job's wait in its queue, its
batch's formation and the handler's run, and the manager's calls, exported by OTLP/gRPC.

Off unless the standard variables ask for it (``OTEL_TRACES_EXPORTER=otlp``; ``OTEL_SDK_DISABLED=true``
turns it off again); then ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_TRACES_SAMPLER`` /
``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_BSP_*`` and ``OTEL_RESOURCE_ATTRIBUTES`` apply as the SDK reads
them. Each service names itself ``sluice-gateway``, ``sluice-worker``, ``sluice-manager``
(``OTEL_SERVICE_NAME``, when set, is used instead). When off, nothing of OpenTelemetry is imported
and callers hold ``None`` instead of a :class:`~sluice.tracing.otel.Tracing`: no cost.

A caller's W3C ``traceparent`` / ``tracestate`` (gRPC metadata or HTTP headers) parents the server
span; the gateway puts its span's context into the job envelope (``Job.traceparent``,
``Job.tracestate``), under which the worker records its spans.
"""

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sluice.log import get_logger

if TYPE_CHECKING:
    from sluice.tracing.otel import Tracing

log = get_logger(__name__)

SUPPORTED_PROTOCOLS = ("grpc",)


class TracingSettingsError(ValueError):
    """The variables ask for tracing in a way Sluice does not offer (named in the message)."""


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for OTLP traces (raises :class:`TracingSettingsError` when it
    asks for an OTLP protocol other than gRPC)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "otlp" not in exporters:
        return False
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = environ.get(variable, "").strip().lower()
        if protocol:
            if protocol not in SUPPORTED_PROTOCOLS:
                raise TracingSettingsError(
                    f"{variable}={protocol} is not supported: Sluice exports OTLP over grpc"
                )
            break
    return True


def start(service: str, environ: Mapping[str, str] = os.environ) -> "Tracing | None":
    """This process's tracing, or None when the environment does not ask for it (or asks for
    something unsupported: logged as an error, and the service runs untraced)."""
    try:
        if not wanted(environ):
            return None
    except TracingSettingsError as exc:
        log.error("tracing off", error=str(exc))
        return None
    from sluice.tracing.otel import Tracing

    name = environ.get("OTEL_SERVICE_NAME") or f"sluice-{service}"
    log.info("tracing on", service_name=name, endpoint=environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""))
    return Tracing(name)


def traced_calls(tracing: "Tracing | None") -> list[Any]:
    """The gRPC server interceptors that trace each call (none when tracing is off)."""
    if tracing is None:
        return []
    from sluice.tracing.grpc_interceptor import TracingInterceptor

    return [TracingInterceptor(tracing)]


def traced_requests(tracing: "Tracing | None") -> list[Any]:
    """The aiohttp middlewares that trace each request (none when tracing is off)."""
    if tracing is None:
        return []
    from sluice.tracing.http_middleware import tracing_middleware

    return [tracing_middleware(tracing)]
