"""Worker containers against worker processes: ``make bench-containers`` (``python -m bench.containers``).

Two Sluice stacks on this host that differ only in the launcher (bench/container_stacks.py), the model
``cnn_b8`` (bench/models.py: ResNet-18-shaped, 3x224x224, batch 8, fill policy). Measured:

1. register-to-READY of one worker (RegisterModel synchronous, then a prediction): a process; a
   container, cold (empty model cache: the archive is fetched by digest and unpacked) and warm;
2. scale-up from 1 to 3 workers (ScaleWorker synchronous: all READY);
3. a killed worker: 2 workers under steady load, the one holding the most jobs killed (``docker kill``
   / ``kill -9``): how long after the kill the last call in flight then is answered, and whether any
   call failed;
4. throughput with 1 and 2 workers, rounds alternating between the two stacks.

Prints a Markdown table and writes bench/results/containers-<timestamp>.json. Not a test: nothing is
asserted; run it on a quiet machine.
"""

import argparse
import asyncio
import functools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.container_stacks import Stack
from bench.loadgen import grpc_channel, grpc_unary_load, run_async
from bench.matrix import cnn
from bench.models import build_archives
from bench.payloads import PREDICTIONS_METHOD, predictions_request, tensor_bytes

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "containers"
RESULTS = ROOT / "results"
LAUNCHERS = ("process", "docker")


@dataclass(frozen=True)
class Sizes:
    concurrency: int = 16
    # Windows long enough that a batch of 8 more or less is ~3%, many of them, alternating between the
    # stacks: a shared machine's noise then falls on both alike.
    window_s: float = 15.0
    warmup_s: float = 2.0
    rounds: int = 6
    kill_concurrency: int = 8
    kill_after_s: float = 3.0
    kill_run_s: float = 15.0


QUICK = Sizes(window_s=4.0, warmup_s=1.0, rounds=1, kill_run_s=10.0)


def request_for(model: str) -> bytes:
    return predictions_request(model, tensor_bytes((3, 224, 224)))


async def killed_run(target: str, request: bytes, sizes: Sizes, kill: Callable[[], None]) -> dict[str, Any]:
    """Steady calls; one worker killed after ``kill_after_s``. Per call: sent, done, ok."""
    calls: list[tuple[float, float, bool]] = []
    killed_at = 0.0
    end = time.perf_counter() + sizes.kill_run_s
    async with grpc_channel(target) as channel:
        stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PREDICTIONS_METHOD)

        async def client() -> None:
            while time.perf_counter() < end:
                sent = time.perf_counter()
                try:
                    await stub(request, timeout=120)
                    ok = True
                except Exception:
                    ok = False
                calls.append((sent, time.perf_counter(), ok))

        async def killer() -> None:
            nonlocal killed_at
            await asyncio.sleep(sizes.kill_after_s)
            killed_at = time.perf_counter()
            await asyncio.to_thread(kill)

        await asyncio.gather(killer(), *(client() for _ in range(sizes.kill_concurrency)))
    held = [done - killed_at for sent, done, _ in calls if sent < killed_at < done]
    return {
        "calls": len(calls),
        "failed": sum(not ok for _, _, ok in calls),
        "in_flight_at_kill": len(held),
        "last_held_answered_s": max(held, default=0.0),
    }


def measure_registration(stack: Stack, model: str, probe: bytes) -> dict[str, float]:
    out: dict[str, float] = {}
    if stack.launcher == "docker":
        stack.drop_model_cache()
        out["register_cold_s"] = stack.register(model, 1, probe)
        stack.unregister(model)
    out["register_s"] = stack.register(model, 1, probe)
    out["scale_1_to_3_s"] = stack.scale(model, 3)
    stack.scale(model, 2)
    return out


def measure_throughput(stacks: dict[str, Stack], model: str, sizes: Sizes) -> dict[str, list[float]]:
    """Calls/s per launcher, one window per round, the launchers' order alternating by round."""
    out: dict[str, list[float]] = {launcher: [] for launcher in stacks}
    request = request_for(model)
    for round_ in range(sizes.rounds):
        order = list(stacks) if round_ % 2 == 0 else list(reversed(stacks))
        for launcher in order:
            load = grpc_unary_load(
                stacks[launcher].server.ports.grpc_target,
                PREDICTIONS_METHOD,
                request,
                concurrency=sizes.concurrency,
                duration_s=sizes.window_s,
                warmup_s=sizes.warmup_s,
            )
            result = run_async(load)
            if result.errors:
                raise RuntimeError(f"{launcher}: errors during the throughput window: {dict(result.errors)}")
            out[launcher].append(result.throughput_rps)
    return out


def run(sizes: Sizes) -> dict[str, Any]:
    store = WORK / "store"
    variants = [cnn(8, 1), cnn(8, 2)]
    build_archives(variants, store, WORK / "weights")
    stacks = {launcher: Stack.start(launcher, WORK, store) for launcher in LAUNCHERS}
    report: dict[str, Any] = {"sizes": sizes.__dict__, "launchers": {}}
    try:
        one = variants[0].name
        for launcher, stack in stacks.items():
            measured: dict[str, Any] = measure_registration(stack, one, request_for(one))
            kill = functools.partial(stack.kill_busiest_worker, one)
            target = stack.server.ports.grpc_target
            measured["killed_worker"] = run_async(killed_run(target, request_for(one), sizes, kill))
            stack.unregister(one)
            report["launchers"][launcher] = measured
        for variant in variants:
            for stack in stacks.values():
                stack.register(variant.name, variant.workers, request_for(variant.name))
            per_launcher = measure_throughput(stacks, variant.name, sizes)
            for launcher, values in per_launcher.items():
                report["launchers"][launcher][f"throughput_w{variant.workers}_rps"] = values
            for stack in stacks.values():
                stack.unregister(variant.name)
    finally:
        for stack in stacks.values():
            stack.stop()
    return report


def _killed(measured: dict[str, Any]) -> str:
    killed = measured["killed_worker"]
    return (
        f"{killed['last_held_answered_s']:.1f} s ({killed['in_flight_at_kill']} in flight, "
        f"{killed['failed']} failed of {killed['calls']})"
    )


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} /s [{min(values):.1f}-{max(values):.1f}]"


def table(report: dict[str, Any]) -> str:
    process, docker = (report["launchers"][name] for name in LAUNCHERS)
    rows = [
        ("register to READY, 1 worker", f"{process['register_s']:.1f} s",
         f"{docker['register_cold_s']:.1f} s cold, {docker['register_s']:.1f} s warm"),
        ("scale-up 1 -> 3 workers", f"{process['scale_1_to_3_s']:.1f} s",
         f"{docker['scale_1_to_3_s']:.1f} s"),
    ]  # fmt: skip
    rows.append(("a killed worker's calls answered within", _killed(process), _killed(docker)))
    for workers in (1, 2):
        key = f"throughput_w{workers}_rps"
        p, d = statistics.median(process[key]), statistics.median(docker[key])
        label = f"cnn_b8 throughput, {workers} worker(s): median [min-max]"
        rows.append((label, _spread(process[key]), f"{_spread(docker[key])}, {d / p - 1:+.1%}"))
    lines = ["| | worker processes | worker containers |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (checks the bench itself)")
    args = parser.parse_args(argv)
    report = run(QUICK if args.quick else Sizes())
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"containers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"\n(results: {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
