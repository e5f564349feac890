"""What the broker alone adds to a call at C=1: ``python -m bench.broker_relay`` (``--quick``).

Sluice's call crosses Redis twice where TorchServe's crosses one socket pair: the gateway's XADD to the
job stream, the worker's blocked XREADGROUP waking, the worker's reply XADD, the gateway's blocked XREAD
waking. This measures exactly that relay, with nothing else: two processes, each on uvloop with Sluice's
own pipelined client (the gateway's and the worker's), a private redis-server, one 64-byte job at a
time. The relay's p50 is the part of Sluice's C=1 latency the design's broker takes, beside the head to
head's gRPC floor and TorchServe's whole call. Not a test: nothing is asserted.
"""

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from sluice.redis.pipelined import PipelinedRedis

from bench.loadgen import run_async
from tests.support.redis_server import RedisServer

JOBS, REPLIES, GROUP = "relay:jobs", "relay:replies", "workers"
PAYLOAD = b"x" * 64


async def _worker(url: str, count: int) -> None:
    """Read each job through the group, reply, then ack it (a Sluice worker's order)."""
    redis = PipelinedRedis(url, timeout_s=60.0, name="worker")
    for _ in range(count):
        got = await redis.send(
            "XREADGROUP", "GROUP", GROUP, "w", "COUNT", 1, "BLOCK", 0, "STREAMS", JOBS, ">"
        )
        [(_stream, [(entry_id, _fields)])] = got
        redis.send("XADD", REPLIES, "*", "m", PAYLOAD)
        await redis.send("XACK", JOBS, GROUP, entry_id)
    await redis.close()


def _worker_process(url: str, count: int) -> None:
    run_async(_worker(url, count))


async def _gateway(url: str, count: int, warmup: int) -> list[float]:
    """Enqueue one job, block on the reply stream for its reply; the time of each round trip (ms)."""
    redis = PipelinedRedis(url, timeout_s=60.0, name="gateway")
    last = "$"
    took = []
    for index in range(count):
        started = time.perf_counter_ns()
        await redis.send("XADD", JOBS, "*", "m", PAYLOAD)
        got = await redis.send("XREAD", "COUNT", 1, "BLOCK", 0, "STREAMS", REPLIES, last)
        [(_stream, [(last, _fields)])] = got
        if index >= warmup:
            took.append((time.perf_counter_ns() - started) / 1e6)
    await redis.close()
    return took


def relay_ms(count: int, warmup: int) -> list[float]:
    """``count`` relays through a private redis-server (no AOF), the first ``warmup`` left out."""
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(Path(folder), appendonly=False)
        server.start()
        try:
            run_async(_setup(server.url))
            worker = multiprocessing.get_context("spawn").Process(
                target=_worker_process, args=(server.url, count), daemon=True
            )
            worker.start()
            try:
                return run_async(_gateway(server.url, count, warmup))
            finally:
                worker.join(timeout=30)
                worker.kill()
        finally:
            server.kill()


async def _setup(url: str) -> None:
    redis = PipelinedRedis(url, name="setup")
    await redis.send("XGROUP", "CREATE", JOBS, GROUP, "$", "MKSTREAM")
    await redis.send("XADD", REPLIES, "*", "init", "1")
    await redis.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2,000 round trips instead of 20,000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    count = 2_000 if args.quick else 20_000
    medians = []
    for _ in range(args.rounds):
        took = relay_ms(count, warmup=count // 10)
        quantiles = statistics.quantiles(took, n=100)
        medians.append(statistics.median(took))
        print(f"relay round trip: p50 {medians[-1]:.3f} ms, p99 {quantiles[98]:.3f} ms ({len(took)} calls)")
    print(f"median of {args.rounds} rounds' p50: {statistics.median(medians):.3f} ms")


if __name__ == "__main__":
    main()
