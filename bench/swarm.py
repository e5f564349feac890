"""Sluice on a local three-node Docker Swarm: ``python -m bench.swarm`` (``make bench-containers`` runs it
after bench/containers.py, whose docker-launcher numbers are the single engine beside these).

``scripts/swarm_up.sh`` builds the swarm (the local engine as manager, two Docker-in-Docker nodes) and
deploys the stack with the ``swarm`` launcher; the model is ``cnn_b8`` (bench/models.py). Measured:

1. register-to-READY of one worker (RegisterModel synchronous, then a prediction), cold (the node
   fetches the archive) and warm;
2. scale-up from 1 to 6 workers (ScaleWorker synchronous: all READY);
3. throughput with 3 workers on 1, 2 and 3 nodes (the other nodes drained while the workers are placed),
   rounds alternating the order. The nodes share this machine's two cores: the numbers say what the
   overlay and the spread cost, not what more machines would give;
4. a killed node: 6 workers over 3 nodes under steady load, a node holding workers (not the manager's,
   where Redis and the gateway run) killed: how long until 6 workers are READY again, and whether any
   call failed.

Prints a Markdown table and writes bench/results/swarm-<timestamp>.json. Not a test; run it on a quiet
machine. The swarm is taken down at the end (``scripts/swarm_down.sh``).
"""

import argparse
import json
import os
import statistics
import subprocess
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.containers import Sizes, killed_run, request_for
from bench.loadgen import grpc_unary_load, run_async
from bench.matrix import cnn
from bench.models import build_archives
from bench.payloads import PREDICTIONS_METHOD
from bench.servers.common import Ports, predict_ok, wait_until

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "swarm"
RESULTS = ROOT / "results"
STACK = "sluicebench"
UP_TIMEOUT_S = 1800
WORKERS = 3


@dataclass(frozen=True)
class SwarmSizes:
    concurrency: int = 16
    window_s: float = 15.0
    warmup_s: float = 2.0
    rounds: int = 2
    kill_run_s: float = 60.0


QUICK = SwarmSizes(window_s=4.0, warmup_s=1.0, rounds=1, kill_run_s=40.0)


def docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


@dataclass
class Swarm:
    ports: Ports
    store: Path

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(
            NODES="3", GATEWAYS="1", SWARM_STACK=STACK, MODEL_STORE=str(self.store),
            GATEWAY_PORT=str(self.ports.grpc), GATEWAY_REST_PORT=str(self.ports.rest),
            GATEWAY_METRICS_PORT=str(self.ports.metrics), MANAGER_PORT=str(self.ports.grpc_management),
            MANAGER_REST_PORT=str(self.ports.management), SLUICE_LOAD_MODELS="",
            SLUICE_ENABLE_MODEL_API="true", SLUICE_DISABLE_TOKEN_AUTHORIZATION="true",
        )  # fmt: skip
        return env

    def script(self, name: str) -> None:
        subprocess.run(["bash", f"scripts/{name}"], cwd=ROOT.parent, env=self.environment(), check=True,
                       timeout=UP_TIMEOUT_S)  # fmt: skip

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    def management(self, method: str, path: str) -> Any:
        url = f"http://127.0.0.1:{self.ports.management}{path}"
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=600) as response:
            return json.loads(response.read() or b"null")

    def register(self, model: str, workers: int) -> float:
        """Seconds from a synchronous registration of one worker until a prediction answers; then,
        untimed, ``workers`` READY and predictions that keep answering (the front may still hold a
        gateway address that moved)."""
        started = time.perf_counter()
        self.management("POST", f"/models?url={model}.mar&initial_workers=1&synchronous=true")
        wait_until(lambda: predict_ok(self.target, request_for(model), 5.0), timeout_s=300)
        took = time.perf_counter() - started
        if workers > 1:  # the archive's model-config.yaml says 1 worker: the count is scaled to
            self.scale(model, workers)
        wait_until(lambda: sum(self.ready_nodes(model).values()) == workers, timeout_s=300, interval_s=0.5)
        wait_until(lambda: all(predict_ok(self.target, request_for(model), 5.0) for _ in range(20)),
                   timeout_s=120)  # fmt: skip
        return took

    def scale(self, model: str, workers: int) -> float:
        started = time.perf_counter()
        self.management("PUT", f"/models/{model}?min_worker={workers}&max_worker={workers}&synchronous=true")
        return time.perf_counter() - started

    def unregister(self, model: str) -> None:
        self.management("DELETE", f"/models/{model}")
        wait_until(lambda: not docker("service", "ls", "-q", "--filter", f"label=io.sluice.model={model}"),
                   timeout_s=120, interval_s=0.5)  # fmt: skip

    def ready_nodes(self, model: str) -> Counter[str]:
        workers = self.management("GET", f"/models/{model}")[0]["workers"]
        return Counter(w.get("node", "") for w in workers if w["status"] == "READY")

    def nodes(self) -> dict[str, dict[str, str]]:
        rows = map(json.loads, docker("node", "ls", "--format", "{{json .}}").splitlines())
        return {row["Hostname"]: row for row in rows}

    def worker_nodes(self) -> list[str]:
        """The nodes that are not the swarm's manager, by hostname."""
        return sorted(name for name, row in self.nodes().items() if not row.get("ManagerStatus"))


def measure_lifecycle(swarm: Swarm, model: str) -> dict[str, float]:
    out = {"register_cold_s": swarm.register(model, 1)}
    swarm.unregister(model)
    out["register_s"] = swarm.register(model, 1)
    out["scale_1_to_6_s"] = swarm.scale(model, 6)
    return out


def measure_spread(swarm: Swarm, model: str, sizes: SwarmSizes) -> dict[str, list[float]]:
    """Calls/s with WORKERS workers on 1, 2 and 3 nodes, the order alternating by round."""
    others = swarm.worker_nodes()
    out: dict[str, list[float]] = {str(n): [] for n in (1, 2, 3)}
    for round_ in range(sizes.rounds):
        order = (1, 2, 3) if round_ % 2 == 0 else (3, 2, 1)
        for nodes in order:
            drained = others[: 3 - nodes]
            for node in drained:
                docker("node", "update", "--availability", "drain", node)
            try:
                swarm.register(model, WORKERS)
            finally:
                for node in drained:
                    docker("node", "update", "--availability", "active", node)
            placed = swarm.ready_nodes(model)
            if len(placed) != nodes:
                raise RuntimeError(f"{WORKERS} workers meant for {nodes} node(s) run on {dict(placed)}")
            load = grpc_unary_load(swarm.target, PREDICTIONS_METHOD, request_for(model),
                                   concurrency=sizes.concurrency, duration_s=sizes.window_s,
                                   warmup_s=sizes.warmup_s)  # fmt: skip
            result = run_async(load)
            if result.errors:
                raise RuntimeError(f"{nodes} node(s): errors during the window: {dict(result.errors)}")
            out[str(nodes)].append(result.throughput_rps)
            swarm.unregister(model)
    return out


def measure_node_kill(swarm: Swarm, model: str, sizes: SwarmSizes) -> dict[str, Any]:
    swarm.register(model, 6)
    placed = swarm.ready_nodes(model)
    victim = max(swarm.worker_nodes(), key=lambda n: placed.get(n, 0))
    restored: dict[str, float] = {}

    def kill() -> None:
        killed_at = time.perf_counter()
        docker("kill", victim)
        wait_until(
            lambda: victim not in swarm.ready_nodes(model) and sum(swarm.ready_nodes(model).values()) == 6,
            timeout_s=300,
            interval_s=0.5,
        )
        restored["restored_s"] = time.perf_counter() - killed_at

    kill_sizes = Sizes(kill_concurrency=8, kill_after_s=3.0, kill_run_s=sizes.kill_run_s)
    try:
        measured = run_async(killed_run(swarm.target, request_for(model), kill_sizes, kill))
    finally:
        docker("start", victim)
    wait_until(lambda: swarm.nodes()[victim]["Status"] == "Ready", timeout_s=180, interval_s=1.0)
    swarm.unregister(model)
    return {**measured, **restored, "workers_on_node": placed.get(victim, 0)}


def run(sizes: SwarmSizes) -> dict[str, Any]:
    store = WORK / "store"
    variant = cnn(8, 1)
    build_archives([variant], store, WORK / "weights")
    store.chmod(0o755)
    for archive in store.iterdir():
        archive.chmod(0o644)
    swarm = Swarm(Ports.free(), store)
    swarm.script("swarm_up.sh")
    report: dict[str, Any] = {"sizes": sizes.__dict__}
    try:
        # The gateway on the manager's node with Redis: draining the other nodes then moves workers
        # only, and a killed node takes no gateway with it.
        docker("service", "update", "--quiet", "--constraint-add", "node.role==manager", f"{STACK}_gateway")
        report["lifecycle"] = measure_lifecycle(swarm, variant.name)
        swarm.unregister(variant.name)
        report["throughput_rps_by_nodes"] = measure_spread(swarm, variant.name, sizes)
        report["node_killed"] = measure_node_kill(swarm, variant.name, sizes)
    finally:
        swarm.script("swarm_down.sh")
    return report


def table(report: dict[str, Any]) -> str:
    life, killed = report["lifecycle"], report["node_killed"]
    rows = [
        (
            "register to READY, 1 worker",
            f"{life['register_cold_s']:.1f} s cold, {life['register_s']:.1f} s warm",
        ),
        ("scale-up 1 -> 6 workers", f"{life['scale_1_to_6_s']:.1f} s"),
    ]
    by_nodes = report["throughput_rps_by_nodes"]
    one = statistics.median(by_nodes["1"])
    for nodes, values in by_nodes.items():
        median = statistics.median(values)
        spread = f"{median:.1f} /s [{min(values):.1f}-{max(values):.1f}] ({median / one - 1:+.1%})"
        rows.append((f"cnn_b8, {WORKERS} workers on {nodes} node(s): median [min-max]", spread))
    rows.append((
        "a killed node (6 workers, "
        f"{killed['workers_on_node']} on it): READY again after",
        f"{killed['restored_s']:.1f} s; {killed['failed']} of {killed['calls']} calls failed, "
        f"{killed['in_flight_at_kill']} in flight answered within {killed['last_held_answered_s']:.1f} s",
    ))  # fmt: skip
    lines = ["| on the swarm (3 nodes, one machine's 2 cores) | |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (checks the bench itself)")
    args = parser.parse_args(argv)
    report = run(QUICK if args.quick else SwarmSizes())
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"swarm-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"\n(results: {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
