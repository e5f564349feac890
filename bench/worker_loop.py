"""Where the worker runs the handler: ``make bench-worker-loop`` (``python -m bench.worker_loop``;
``--quick``).

Two Sluice stacks serve the same archives: one runs plain batching's handler inline on the worker
loop's thread (``SLUICE_INLINE_HANDLER=true``, the default), the other on the torch thread
(``false``).
In each round, in alternating order (A B, B A, ...), each stack gets the MLP (batch 1, one worker)
at C=1 (p50, p99 and the worker's CPU per request), then the MLP and the CNN (batch 8, fill, one
worker) at C=16 for throughput; the other stack idles meanwhile. Prints a Markdown table (median of
rounds, with the range) and writes ``bench/results/worker-loop-<timestamp>.json``. Not a test:
nothing is asserted.
"""

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from bench.collectors import cpu_seconds
from bench.loadgen import grpc_unary_load, run_async
from bench.models import Variant, build_archives
from bench.payloads import PREDICTIONS_METHOD, predictions_request, tensor_bytes
from bench.platform import distinct_ports
from bench.servers.sluice import SluiceServer
from bench.stats import latency_summary_ms, spread

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "worker-loop"
RESULTS = ROOT / "results"
MLP = Variant("mlp")
CNN = Variant("cnn", batch_size=8)
SATURATING_CONCURRENCY = 16
STACKS = {"inline": "true", "torch thread": "false"}


@dataclass(frozen=True)
class Sizes:
    window_s: float = 10.0
    warmup_s: float = 2.0
    rounds: int = 4


QUICK = Sizes(window_s=3.0, warmup_s=1.0, rounds=2)


def _workers(server: SluiceServer, model: str) -> list[psutil.Process]:
    return [
        process
        for role, processes in server.processes().items()
        if role.startswith(f"worker:{model}:")
        for process in processes
    ]


def _cpu_s(processes: list[psutil.Process]) -> float:
    return cpu_seconds({"workers": processes})["workers"]


def one_round(server: SluiceServer, requests: dict[str, bytes], sizes: Sizes) -> dict[str, Any]:
    target = server.ports.grpc_target
    workers = _workers(server, MLP.name)
    before = _cpu_s(workers)
    single = run_async(
        grpc_unary_load(
            target, PREDICTIONS_METHOD, requests[MLP.name], concurrency=1,
            duration_s=sizes.window_s, warmup_s=sizes.warmup_s,
        )
    )  # fmt: skip
    # The warm-up's calls are in the CPU time as well: per request over every answer of the run.
    worker_ms = (_cpu_s(workers) - before) * 1000 / max(1, single.completed)
    saturated = {
        variant.name: run_async(
            grpc_unary_load(
                target,
                PREDICTIONS_METHOD,
                requests[variant.name],
                concurrency=SATURATING_CONCURRENCY,
                duration_s=sizes.window_s,
                warmup_s=sizes.warmup_s,
            )
        )
        for variant in (MLP, CNN)
    }
    latency = latency_summary_ms(single.latencies_ns)
    return {
        "mlp_c1_p50_ms": latency["p50"],
        "mlp_c1_p99_ms": latency["p99"],
        "mlp_worker_cpu_ms_per_request": worker_ms,
        "mlp_throughput_rps": saturated[MLP.name].throughput_rps,
        "cnn_throughput_rps": saturated[CNN.name].throughput_rps,
        "errors": sum(single.errors.values()) + sum(sum(r.errors.values()) for r in saturated.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="two short rounds")
    parser.add_argument("--rounds", type=int, help="rounds instead of the preset's")
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    if args.rounds:
        sizes = replace(sizes, rounds=args.rounds)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    WORK.mkdir(parents=True, exist_ok=True)
    store = WORK / "store"
    build_archives([MLP, CNN], store, WORK / "weights")
    requests = {v.name: predictions_request(v.name, tensor_bytes(v.shape)) for v in (MLP, CNN)}
    servers = {
        name: SluiceServer(WORK / name.replace(" ", "-"), store, ports, name=name.replace(" ", "-"),
                           extra_env={"SLUICE_INLINE_HANDLER": inline})
        for (name, inline), ports in zip(STACKS.items(), distinct_ports(len(STACKS)), strict=True)
    }  # fmt: skip
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            server.start([MLP.name, CNN.name])
        order = list(servers)
        for round_index in range(sizes.rounds):
            for name in order if round_index % 2 == 0 else order[::-1]:
                rows[name].append(one_round(servers[name], requests, sizes))
    finally:
        for server in servers.values():
            server.stop()
    report(sizes, rows)


def report(sizes: Sizes, rows: dict[str, list[dict[str, Any]]]) -> None:
    print(
        "\n| handler runs | MLP C=1 p50 ms | MLP C=1 p99 ms | MLP worker CPU ms/request "
        f"| MLP req/s at C={SATURATING_CONCURRENCY} | CNN b8 req/s at C={SATURATING_CONCURRENCY} "
        "| failed calls |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, measured in rows.items():
        cells = [
            spread(row[key] for row in measured).format(digits)
            for key, digits in (
                ("mlp_c1_p50_ms", 2),
                ("mlp_c1_p99_ms", 2),
                ("mlp_worker_cpu_ms_per_request", 2),
                ("mlp_throughput_rps", 0),
                ("cnn_throughput_rps", 1),
            )
        ]
        print(f"| {name} | {' | '.join(cells)} | {sum(row['errors'] for row in measured)} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"worker-loop-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"sizes": asdict(sizes), "rows": rows}, indent=2))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
