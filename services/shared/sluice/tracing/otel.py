"""The OpenTelemetry side of :mod:`sluice.tracing`, imported only when tracing is on."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# W3C trace context: the caller's gRPC metadata keys or HTTP headers, and the job's fields.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_PROPAGATOR = TraceContextTextMapPropagator()


class Tracing:
    def __init__(self, service_name: str) -> None:
        # Resource.create merges OTEL_RESOURCE_ATTRIBUTES; the sampler comes from OTEL_TRACES_SAMPLER.
        self._provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("sluice")

    @contextmanager
    def server_span(
        self, name: str, carrier: Mapping[str, str], attributes: Mapping[str, Any] | None = None
    ) -> Iterator[Span]:
        """A server span for one call, parented under the caller's ``traceparent`` when it sent one,
        current (for :meth:`outgoing`) while inside."""
        parent = _PROPAGATOR.extract(carrier)
        with self._tracer.start_as_current_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=dict(attributes or {})
        ) as span:
            yield span

    def outgoing(self) -> tuple[str, str]:
        """The current span's ``traceparent`` and ``tracestate`` for a job; ("", "") when no span is
        current or it is not sampled (the worker, parent-based, would record nothing under it: its job
        then costs the worker no tracing at all)."""
        if not trace.get_current_span().get_span_context().trace_flags.sampled:
            return "", ""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get(TRACEPARENT, ""), carrier.get(TRACESTATE, "")

    def record(
        self,
        traceparent: str,
        tracestate: str,
        name: str,
        start_ns: int,
        end_ns: int,
        children: list[tuple[str, int, int]],
        attributes: Mapping[str, Any],
        error: str = "",
    ) -> None:
        """A finished span ``name`` under the given parent, with ``children`` (name, start, end) under
        it, all with times already known (the worker records a job's spans once it is done)."""
        parent = _PROPAGATOR.extract({TRACEPARENT: traceparent, TRACESTATE: tracestate})
        span = self._tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=dict(attributes), start_time=start_ns
        )
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        inside = trace.set_span_in_context(span)
        for child, child_start, child_end in children:
            self._tracer.start_span(child, context=inside, start_time=child_start).end(end_time=child_end)
        span.end(end_time=end_ns)

    def mark_error(self, span: Span, message: str) -> None:
        span.set_status(Status(StatusCode.ERROR, message))

    def shutdown(self) -> None:
        """Export what is buffered, then stop."""
        self._provider.shutdown()
