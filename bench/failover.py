"""The broker failing over: ``make bench-failover`` (``python -m bench.failover``; ``--quick``).

1. What a failover costs clients. Sluice on Redis Sentinel (a master, two replicas and three Sentinels
   on loopback, ``down-after-milliseconds`` 1000, the Sentinels' quorum 2), then on a Redis Cluster
   (three masters with a replica each, ``cluster-node-timeout`` 1000), serves the MLP model (batch 1,
   one worker) to a steady closed-loop load of ``clients`` gRPC clients; the master (on the Cluster:
   the one serving the model's slot) is SIGKILLed, then restarted to rejoin as a replica, ``kills``
   times. Per kill: the outage (from the first failed call to the first call answered after it), the
   time from the kill until inference answered again, and the calls that failed until the failover
   was over (those failing while the killed server rejoined are counted apart).
2. What Sentinel and Cluster cost when nothing fails: C=1 latency and throughput at C=16 through the
   private Redis of ``sluice start``, through Sentinel and through a Redis Cluster of three masters, in
   the same rounds (rotating order; the others idle).

Prints Markdown tables and writes ``bench/results/failover-<timestamp>.json``. Not a test: nothing is
asserted.
"""

import argparse
import asyncio
import json
import logging
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from sluice.redis import keys

from bench.loadgen import classify, grpc_channel, grpc_unary_load, run_async
from bench.models import MODEL_VERSION, Variant, build_archives
from bench.payloads import PREDICTIONS_METHOD, predictions_request, tensor_bytes
from bench.servers.sluice import SluiceServer
from bench.stats import latency_summary_ms, spread
from tests.support.redis_cluster import ClusterNodeServer, RedisClusterGroup
from tests.support.redis_sentinel import MASTER_NAME, SentinelGroup

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "failover"
RESULTS = ROOT / "results"
MODEL = Variant("mlp")
CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sizes:
    clients: int = 8
    kills: int = 3
    # Load before each kill, and after the model answers again.
    settle_s: float = 5.0
    window_s: float = 10.0
    warmup_s: float = 2.0
    rounds: int = 3
    throughput_concurrency: int = 16


QUICK = Sizes(kills=1, settle_s=2.0, window_s=3.0, warmup_s=1.0, rounds=1)


@dataclass(frozen=True)
class CallRecord:
    started: float
    ended: float
    error: str = ""


@dataclass(frozen=True)
class Outage:
    outage_s: float
    served_again_after_kill_s: float
    failed: dict[str, int]
    calls: int
    # Calls that failed while the killed server restarted and rejoined.
    failed_rejoining: int = 0


def outage_of(calls: list[CallRecord], killed_at: float, rejoining_at: float) -> Outage:
    """The first failure after the kill, the first answer after it, and the failures until the
    failover was over (and those while the killed server rejoined)."""
    failures = sorted(
        (call for call in calls if call.error and killed_at <= call.ended < rejoining_at),
        key=lambda c: c.ended,
    )
    first_failure = failures[0].ended if failures else killed_at
    answers = [call.ended for call in calls if not call.error and call.started >= first_failure]
    served_again = min(answers, default=float("nan"))
    failed = Counter(call.error for call in failures)
    rejoining = sum(1 for call in calls if call.error and call.ended >= rejoining_at)
    return Outage(served_again - first_failure, served_again - killed_at, dict(failed), len(calls), rejoining)


class Faults(Protocol):
    """Kill the broker's master, wait for the failover, restart the killed server."""

    def kill(self) -> Any: ...

    def wait_for_failover(self, killed: Any) -> None: ...

    def rejoin(self, killed: Any) -> None: ...


class SentinelFaults:
    def __init__(self, group: SentinelGroup) -> None:
        self._group = group

    def kill(self) -> Any:
        return self._group.kill_master()

    def wait_for_failover(self, killed: Any) -> None:
        self._group.wait_for_failover(killed.port)

    def rejoin(self, killed: Any) -> None:
        self._group.rejoin(killed)


class ClusterFaults:
    """Kills the master serving the model's version."""

    def __init__(self, group: RedisClusterGroup) -> None:
        self._group = group
        self._key = keys.job_stream(MODEL.name, MODEL_VERSION)

    def kill(self) -> ClusterNodeServer:
        return self._group.kill_owner(self._key)

    def wait_for_failover(self, killed: Any) -> None:
        self._group.wait_for_failover(killed, self._key)

    def rejoin(self, killed: Any) -> None:
        self._group.rejoin(killed)


async def steady_load(target: str, request: bytes, clients: int, stop: asyncio.Event) -> list[CallRecord]:
    """``clients`` closed loops of Predictions until ``stop``; every call recorded."""
    calls: list[CallRecord] = []
    async with grpc_channel(target) as channel:
        stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PREDICTIONS_METHOD)

        async def client() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    await stub(request, timeout=CALL_TIMEOUT_S)
                    calls.append(CallRecord(started, time.monotonic()))
                except grpc.aio.AioRpcError as exc:
                    calls.append(CallRecord(started, time.monotonic(), classify(exc)))
                    await asyncio.sleep(0.01)

        await asyncio.gather(*(client() for _ in range(clients)))
    return calls


async def measure_outages(server: SluiceServer, faults: Faults, request: bytes, sizes: Sizes) -> list[Outage]:
    stop = asyncio.Event()
    load = asyncio.create_task(steady_load(server.ports.grpc_target, request, sizes.clients, stop))
    phases: list[tuple[float, float]] = []
    for _ in range(sizes.kills):
        await asyncio.sleep(sizes.settle_s)
        killed = await asyncio.to_thread(faults.kill)
        killed_at = time.monotonic()
        await asyncio.to_thread(faults.wait_for_failover, killed)
        await asyncio.sleep(sizes.settle_s)
        phases.append((killed_at, time.monotonic()))
        await asyncio.to_thread(faults.rejoin, killed)
    stop.set()
    calls = await load
    bounds = [killed_at - sizes.settle_s for killed_at, _ in phases[1:]] + [float("inf")]
    return [
        outage_of(
            [call for call in calls if killed_at - sizes.settle_s <= call.started < until],
            killed_at,
            rejoining,
        )
        for (killed_at, rejoining), until in zip(phases, bounds, strict=True)
    ]


async def hot_path(target: str, request: bytes, sizes: Sizes) -> dict[str, Any]:
    """C=1 latency and throughput at the sizes' concurrency."""
    single = await grpc_unary_load(
        target, PREDICTIONS_METHOD, request, concurrency=1, duration_s=sizes.window_s, warmup_s=sizes.warmup_s
    )
    loaded = await grpc_unary_load(
        target,
        PREDICTIONS_METHOD,
        request,
        concurrency=sizes.throughput_concurrency,
        duration_s=sizes.window_s,
        warmup_s=sizes.warmup_s,
    )
    return {
        "c1_p50_ms": latency_summary_ms(single.latencies_ns)["p50"],
        "c1_errors": dict(single.errors),
        "throughput_rps": loaded.throughput_rps,
        "throughput_errors": dict(loaded.errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one kill, one short round")
    sizes = QUICK if parser.parse_args().quick else Sizes()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    WORK.mkdir(parents=True, exist_ok=True)
    store = WORK / "store"
    build_archives([MODEL], store, WORK / "weights")
    request = predictions_request(MODEL.name, tensor_bytes(MODEL.shape))
    with tempfile.TemporaryDirectory(prefix="sl-failover-") as folder:
        group = SentinelGroup(Path(folder) / "sentinel")
        group.start()
        cluster = RedisClusterGroup(Path(folder) / "cluster", replicas=1)
        cluster.start()
        servers = [
            SluiceServer(WORK / "single", store, name="single"),
            SluiceServer(
                WORK / "sentinel",
                store,
                name="sentinel",
                extra_properties={
                    "sluice_redis_sentinels": group.addresses,
                    "sluice_redis_sentinel_master": MASTER_NAME,
                },
            ),
            SluiceServer(
                WORK / "cluster",
                store,
                name="cluster",
                extra_properties={"sluice_redis_cluster": cluster.seeds},
            ),
        ]
        try:
            for server in servers:
                server.start([MODEL.name])
            rows: dict[str, list[dict[str, Any]]] = {server.name: [] for server in servers}
            for round_index in range(sizes.rounds):
                shift = round_index % len(servers)
                for server in servers[shift:] + servers[:shift]:
                    rows[server.name].append(run_async(hot_path(server.ports.grpc_target, request, sizes)))
            outages = {
                "sentinel": run_async(measure_outages(servers[1], SentinelFaults(group), request, sizes)),
                "cluster": run_async(measure_outages(servers[2], ClusterFaults(cluster), request, sizes)),
            }
        finally:
            for server in servers:
                server.stop()
            group.stop()
            cluster.stop()
    report(sizes, rows, outages)


def report(sizes: Sizes, rows: dict[str, list[dict[str, Any]]], outages: dict[str, list[Outage]]) -> None:
    print(f"\n| Redis | C=1 p50 ms | throughput at C={sizes.throughput_concurrency}, rps |")
    print("|---|---|---|")
    for name, measured in rows.items():
        p50 = spread(row["c1_p50_ms"] for row in measured)
        rps = spread(row["throughput_rps"] for row in measured)
        print(f"| {name} | {p50.format(2)} | {rps.format(0)} |")
    print(
        "\n| Redis | kill | outage s | served again after kill s | failed calls | failed while rejoining "
        f"| calls ({sizes.clients} clients) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, kills in outages.items():
        for index, outage in enumerate(kills, 1):
            failed = (
                ", ".join(f"{count} {status}" for status, count in sorted(outage.failed.items())) or "none"
            )
            cells = [
                name, str(index), f"{outage.outage_s:.2f}", f"{outage.served_again_after_kill_s:.2f}", failed,
                str(outage.failed_rejoining), str(outage.calls),
            ]  # fmt: skip
            print(f"| {' | '.join(cells)} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"failover-{time.strftime('%Y%m%d-%H%M%S')}.json"
    dumped = {name: [asdict(outage) for outage in kills] for name, kills in outages.items()}
    out.write_text(json.dumps({"sizes": asdict(sizes), "hot_path": rows, "outages": dumped}, indent=2))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
