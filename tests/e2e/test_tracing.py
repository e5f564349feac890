"""OpenTelemetry traces across the hops with the standard variables, exported to a real OTLP/gRPC
receiver in the test: a call carrying W3C ``traceparent`` (gRPC metadata, HTTP header) yields the
gateway's span under the caller's, the worker's job span under the gateway's with its queue wait,
batch formation and handler run; the manager's calls are traced too; each service has its own
``service.name``."""

import secrets
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.empty_pb2 import Empty
from sluice.v1.torchserve_inference_pb2 import PredictionsRequest
from sluice.v1.torchserve_inference_pb2_grpc import InferenceAPIsServiceStub

from tests.support import metrics_archive
from tests.support.cli_stack import Stack
from tests.support.eventually import eventually
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan

MODEL = metrics_archive.MODEL
WORKER_PHASES = ["queue wait", "batch formation", "handler"]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    started = OtlpReceiver().start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("tracing")
    # The metered handler records declared metrics (its archive comes with their file).
    built = Stack.create(root, f"metrics_config={metrics_archive.metrics_config(root)}\n")
    built.env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    metrics_archive.archive(built.store)
    built.start([f"{MODEL}={MODEL}.mar"])
    try:
        yield built
    finally:
        built.stop()


def fetch(request: urllib.request.Request) -> bytes:
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
    return body


def caller() -> tuple[str, str, str]:
    """A caller's trace id, span id and its ``traceparent`` (sampled)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def one(spans: list[ReceivedSpan], **wanted: str) -> ReceivedSpan:
    found = [span for span in spans if all(getattr(span, key) == value for key, value in wanted.items())]
    assert len(found) == 1, (wanted, spans)
    return found[0]


async def wait_for(receiver: OtlpReceiver, trace_id: str, names: list[str]) -> list[ReceivedSpan]:
    try:
        await eventually(
            lambda: set(names) <= {span.name for span in receiver.in_trace(trace_id)}, timeout_s=30
        )
    except TimeoutError:
        pytest.fail(f"spans {names} not received; the trace has {receiver.in_trace(trace_id)}")
    return receiver.in_trace(trace_id)


def assert_worker_spans_under(spans: list[ReceivedSpan], gateway: ReceivedSpan) -> None:
    job = one(spans, name="sluice.worker.job")
    assert (job.service, job.parent_span_id) == ("sluice-worker", gateway.span_id)
    assert job.attributes["sluice.model"] == MODEL
    assert job.attributes["sluice.status_code"] == 200
    phases = sorted((span for span in spans if span.parent_span_id == job.span_id), key=lambda s: s.start_ns)
    assert [span.name for span in phases] == WORKER_PHASES
    # The phases follow one another inside the job's span.
    assert job.start_ns <= phases[0].start_ns <= phases[0].end_ns <= phases[1].start_ns
    assert phases[1].end_ns <= phases[2].start_ns <= phases[2].end_ns <= job.end_ns


async def test_a_grpc_call_is_traced_from_the_gateway_to_the_handler(
    stack: Stack, receiver: OtlpReceiver
) -> None:
    trace_id, parent, traceparent = caller()
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        reply = await InferenceAPIsServiceStub(channel).Predictions(
            PredictionsRequest(model_name=MODEL, input={"data": b"7"}),
            metadata=(("traceparent", traceparent),),
        )
    assert reply.prediction == b"ok"
    method = "org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
    spans = await wait_for(receiver, trace_id, [method, "sluice.worker.job", *WORKER_PHASES])
    gateway = one(spans, name=method)
    assert (gateway.service, gateway.parent_span_id) == ("sluice-gateway", parent)
    assert not gateway.error
    assert_worker_spans_under(spans, gateway)


async def test_a_rest_call_is_traced_from_its_traceparent_header(
    stack: Stack, receiver: OtlpReceiver
) -> None:
    trace_id, parent, traceparent = caller()
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.http_port}/predictions/{MODEL}",
        data=b"3",
        headers={"Content-Type": "text/plain", "traceparent": traceparent},
    )
    assert fetch(request) == b"ok"
    route = "POST /predictions/{model}"
    spans = await wait_for(receiver, trace_id, [route, "sluice.worker.job"])
    gateway = one(spans, name=route)
    assert (gateway.service, gateway.parent_span_id) == ("sluice-gateway", parent)
    assert gateway.attributes["http.response.status_code"] == 200
    assert_worker_spans_under(spans, gateway)


async def test_the_managers_calls_are_traced(stack: Stack, receiver: OtlpReceiver) -> None:
    trace_id, parent, traceparent = caller()
    request = urllib.request.Request(
        f"http://127.0.0.1:{stack.management_http_port}/models", headers={"traceparent": traceparent}
    )
    assert MODEL in fetch(request).decode()
    spans = await wait_for(receiver, trace_id, ["GET /models"])
    manager = one(spans, name="GET /models")
    assert (manager.service, manager.parent_span_id) == ("sluice-manager", parent)


async def test_a_failed_call_marks_the_gateways_span(stack: Stack, receiver: OtlpReceiver) -> None:
    trace_id, parent, traceparent = caller()
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await InferenceAPIsServiceStub(channel).Predictions(
                PredictionsRequest(model_name="nope", input={"data": b"1"}),
                metadata=(("traceparent", traceparent),),
            )
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    method = "org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions"
    spans = await wait_for(receiver, trace_id, [method])
    gateway = one(spans, name=method)
    assert gateway.parent_span_id == parent
    assert gateway.error


async def test_a_caller_that_does_not_sample_gets_no_spans(stack: Stack, receiver: OtlpReceiver) -> None:
    unsampled_trace, _parent, sampled_header = caller()
    unsampled_header = sampled_header[:-2] + "00"
    sampled_trace, _, traceparent = caller()
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        stub = InferenceAPIsServiceStub(channel)
        for header in (unsampled_header, traceparent):
            reply = await stub.Predictions(
                PredictionsRequest(model_name=MODEL, input={"data": b"1"}),
                metadata=(("traceparent", header),),
            )
            assert reply.prediction == b"ok"
    # Spans are exported in the order they end: once the later call's are in, the earlier's would be.
    await wait_for(receiver, sampled_trace, ["sluice.worker.job", *WORKER_PHASES])
    assert receiver.in_trace(unsampled_trace) == []


async def test_health_checks_are_not_traced(stack: Stack, receiver: OtlpReceiver) -> None:
    # `sluice start` waited on the gateway's grpc.health.v1 before any test ran; a traced call since
    # makes sure the exporter has sent what it had.
    trace_id, _parent, traceparent = caller()
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        await InferenceAPIsServiceStub(channel).Ping(Empty(), metadata=(("traceparent", traceparent),))
    await wait_for(receiver, trace_id, ["org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping"])
    assert [span.name for span in receiver.spans() if span.name.startswith("grpc.health.v1.")] == []
