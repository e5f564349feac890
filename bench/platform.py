"""What the platform basics cost on the hot path: ``make bench-platform`` (``python -m bench.platform``;
``--quick``).

Four Sluice stacks serve the MLP model (batch 1, one worker) from the same archive: plain; gRPC over
TLS (``enable_grpc_ssl`` with a self-signed certificate, the client verifying it); OpenTelemetry
tracing on with every call sampled (``parentbased_traceidratio``, 1.0), and with 1% sampled, both
exporting by OTLP/gRPC to a receiver in this process. In each round, in an order that rotates, each
stack gets C=1 for latency, then C=16 and C=32 for throughput (the best of the two is reported); the
others idle meanwhile. Prints a Markdown table (median of rounds, with the range) and writes
``bench/results/platform-<timestamp>.json``. Not a test: nothing is asserted.
"""

import argparse
import json
import logging
import tempfile
import time
from dataclasses import asdict, astuple, dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.loadgen import grpc_unary_load, run_async
from bench.models import Variant, build_archives
from bench.payloads import PREDICTIONS_METHOD, predictions_request, tensor_bytes
from bench.servers.common import Ports
from bench.servers.sluice import SluiceServer
from bench.stats import latency_summary_ms, spread
from tests.support.certificates import make_certificate
from tests.support.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "platform"
RESULTS = ROOT / "results"
MODEL = Variant("mlp")
THROUGHPUT_CONCURRENCY = (16, 32)


@dataclass(frozen=True)
class Sizes:
    window_s: float = 10.0
    warmup_s: float = 2.0
    rounds: int = 3


QUICK = Sizes(window_s=3.0, warmup_s=1.0, rounds=1)


@dataclass
class Stack:
    name: str
    server: SluiceServer
    credentials: grpc.ChannelCredentials | None = None


def tracing_env(receiver: OtlpReceiver, ratio: float) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(ratio),
    }


def distinct_ports(count: int) -> list[Ports]:
    """Ports for ``count`` stacks that run side by side, none shared between two."""
    taken: set[int] = set()
    chosen: list[Ports] = []
    while len(chosen) < count:
        ports = Ports.free()
        numbers = set(astuple(ports))
        if not numbers & taken:
            taken |= numbers
            chosen.append(ports)
    return chosen


def variants(store: Path, folder: Path, receiver: OtlpReceiver) -> list[Stack]:
    certificate, key = make_certificate(folder)
    plain, tls_ports, all_ports, one_ports = distinct_ports(4)
    credentials = grpc.ssl_channel_credentials(root_certificates=certificate.read_bytes())
    tls = {"enable_grpc_ssl": "true", "certificate_file": str(certificate), "private_key_file": str(key)}
    return [
        Stack("plain", SluiceServer(WORK / "plain", store, plain, name="plain")),
        Stack(
            "TLS (gRPC)",
            SluiceServer(
                WORK / "tls", store, tls_ports, name="tls", extra_properties=tls, grpc_credentials=credentials
            ),
            credentials,
        ),
        Stack(
            "tracing, 100% sampled",
            SluiceServer(
                WORK / "trace-all", store, all_ports, name="trace-all", extra_env=tracing_env(receiver, 1.0)
            ),
        ),
        Stack(
            "tracing, 1% sampled",
            SluiceServer(
                WORK / "trace-1", store, one_ports, name="trace-1", extra_env=tracing_env(receiver, 0.01)
            ),
        ),
    ]


async def hot_path(variant: Stack, request: bytes, sizes: Sizes) -> dict[str, Any]:
    target = variant.server.ports.grpc_target

    async def load(concurrency: int) -> Any:
        return await grpc_unary_load(
            target,
            PREDICTIONS_METHOD,
            request,
            concurrency=concurrency,
            duration_s=sizes.window_s,
            warmup_s=sizes.warmup_s,
            credentials=variant.credentials,
        )

    single = await load(1)
    loaded = [await load(concurrency) for concurrency in THROUGHPUT_CONCURRENCY]
    latency = latency_summary_ms(single.latencies_ns)
    return {
        "c1_p50_ms": latency["p50"],
        "c1_p99_ms": latency["p99"],
        "best_throughput_rps": max(result.throughput_rps for result in loaded),
        "errors": sum(sum(result.errors.values()) for result in (single, *loaded)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one short round")
    sizes = QUICK if parser.parse_args().quick else Sizes()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    WORK.mkdir(parents=True, exist_ok=True)
    store = WORK / "store"
    build_archives([MODEL], store, WORK / "weights")
    request = predictions_request(MODEL.name, tensor_bytes(MODEL.shape))
    receiver = OtlpReceiver().start()
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="sl-platform-") as folder:
        measured = variants(store, Path(folder), receiver)
        try:
            for variant in measured:
                variant.server.start([MODEL.name])
                rows[variant.name] = []
            for round_index in range(sizes.rounds):
                shift = round_index % len(measured)
                for variant in measured[shift:] + measured[:shift]:
                    rows[variant.name].append(run_async(hot_path(variant, request, sizes)))
        finally:
            for variant in measured:
                variant.server.stop()
            receiver.stop()
    report(sizes, rows, len(receiver.spans()))


def report(sizes: Sizes, rows: dict[str, list[dict[str, Any]]], spans: int) -> None:
    print("\n| stack | C=1 p50 ms | C=1 p99 ms | best throughput, rps (C=16 or 32) | failed calls |")
    print("|---|---|---|---|---|")
    for name, measured in rows.items():
        p50 = spread(row["c1_p50_ms"] for row in measured)
        p99 = spread(row["c1_p99_ms"] for row in measured)
        rps = spread(row["best_throughput_rps"] for row in measured)
        errors = sum(row["errors"] for row in measured)
        print(f"| {name} | {p50.format(2)} | {p99.format(2)} | {rps.format(0)} | {errors} |")
    print(f"\nspans received by the OTLP receiver: {spans}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"platform-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"sizes": asdict(sizes), "rows": rows, "spans": spans}, indent=2))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
