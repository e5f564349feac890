"""When tracing is on: the standard OTEL_* variables decide, and a protocol Sluice does not export
is named, not silently ignored."""

import pytest
from sluice import tracing


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console, OTLP"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, True),
    ],
)
def test_the_standard_variables_switch_tracing(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on


def test_an_unsupported_protocol_is_named() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    with pytest.raises(tracing.TracingSettingsError, match="OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"):
        tracing.wanted(environ)
    # The signal-specific variable wins over the general one.
    assert tracing.wanted({**environ, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"})
    # A service asked for it runs untraced rather than not at all.
    assert tracing.start("gateway", environ) is None


def test_off_means_no_tracing_object_and_no_interceptors() -> None:
    assert tracing.start("gateway", {}) is None
    assert tracing.traced_calls(None) == []
    assert tracing.traced_requests(None) == []
