"""Workflows: ``make bench-workflows`` (``python -m bench.workflows``; ``--quick``).

A three-node TorchServe workflow ``pipe``: ``pre -> cnn -> post`` (``workflow_store.py``): ``pre`` turns
a 3x32x32 image sent as JSON into the CNN's input (normalized float32 bytes), ``cnn`` is the benchmark
CNN (ResNet-18-shaped, batch 8, ``maxBatchDelay`` 5 ms, one worker), ``post`` turns its 1000 logits
into ``{"class": k, "score": s}``. Setups, all REST over aiohttp from this process, every answer
checked against the pipeline's answer computed in-process:

1. Sluice ``POST /wfpredict/pipe`` (the gateway runs the DAG: three jobs, one per node);
2. TorchServe 0.12 ``POST /wfpredict/pipe`` on the same ``.war`` and ``.mar`` files (one folder is both
   servers' model and workflow store);
3. Sluice, the client chaining ``/predictions/pre`` -> ``/predictions/cnn`` -> ``/predictions/post``
   itself, on plain models built from the same functions and the same CNN archive;
4. Sluice's KServe v2 form of the workflow, ``POST /v2/models/pipe/infer`` with one BYTES input;
5. TorchServe, the client chaining the three calls itself (what its workflow saves, or costs).

Sluice and TorchServe run at once (each idle while the other is measured), every worker with one torch
thread (TorchServe's get ``OMP_NUM_THREADS=1``; Sluice's CNN workers are checked to have 1). Each setup
is first warmed (TorchServe's JIT), then in each round (the setups' order reversed every other round)
each gets C=1 (latency), then each concurrency of ``Sizes.concurrency`` (the best is its throughput).
The client shares the two cores with the servers. Writes ``bench/results/workflows-<timestamp>/``
(``results.json``, ``report.md``) and prints the report. Not a test: nothing is asserted.
"""

import argparse
import gzip
import json
import logging
import os
import shutil
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench import tools
from bench.collectors import ResourceMonitor, Roles
from bench.loadgen import run_async
from bench.servers.common import wait_until
from bench.servers.sluice import SluiceServer
from bench.servers.torchserve import TorchServeServer
from bench.workflow_store import CNN, MODELS, WORKFLOW, Request, build_store, request
from bench.workflows_load import STALL_S, run_load
from bench.workflows_report import write_report

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "workflows"
RESULTS = ROOT / "results"
READY_TIMEOUT_S = 300.0
REGISTER_TIMEOUT_S = 300.0
TORCH_THREADS = 1
WARM_CONCURRENCY = 16


@dataclass(frozen=True)
class Sizes:
    window_s: float = 8.0
    warmup_s: float = 2.0
    rounds: int = 3
    concurrency: tuple[int, ...] = (4, 16, 32)
    # Load on each setup before the first round (TorchServe's JIT, the servers' caches).
    server_warmup_s: float = 20.0
    # No window starts after this many seconds from the start of the run.
    deadline_s: float = 18 * 60.0


QUICK = Sizes(window_s=3.0, warmup_s=1.0, rounds=1, concurrency=(16,), server_warmup_s=3.0, deadline_s=165.0)


@dataclass(frozen=True)
class Setup:
    key: str
    label: str
    server: str  # "sluice" or "torchserve"
    form: str  # workflows_load.FORMS


SETUPS = (
    Setup("sluice_workflow", "Sluice `/wfpredict/pipe`", "sluice", "workflow"),
    Setup("torchserve_workflow", "TorchServe `/wfpredict/pipe`", "torchserve", "workflow"),
    Setup("sluice_chain", "Sluice, client chains pre → cnn → post", "sluice", "chain"),
    Setup("sluice_kserve", "Sluice KServe v2 `/v2/models/pipe/infer`", "sluice", "kserve"),
    Setup("torchserve_chain", "TorchServe, client chains pre → cnn → post", "torchserve", "chain"),
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _post(url: str) -> bytes:
    with urllib.request.urlopen(
        urllib.request.Request(url, method="POST"), timeout=REGISTER_TIMEOUT_S
    ) as answer:
        body: bytes = answer.read()
    return body


def _describe(management_url: str, model: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{management_url}/models/{model}", timeout=10) as answer:
        described: list[dict[str, Any]] = json.loads(answer.read())
    return described


class Stacks:
    """Sluice and (unless left out) TorchServe, each serving the plain models and the workflow."""

    def __init__(self, store: Path, venv: Path | None) -> None:
        self.sluice = SluiceServer(
            WORK / "sluice", store, name="sluice", extra_properties={"workflow_store": str(store)}
        )
        self.torchserve = (
            None
            if venv is None
            else TorchServeServer(
                venv,
                WORK / "torchserve",
                store,
                extra_env={"OMP_NUM_THREADS": str(TORCH_THREADS)},
                properties={"workflow_store": str(store)},
            )
        )
        self.facts: dict[str, Any] = {}

    def start(self) -> None:
        started = time.perf_counter()
        timing = self.sluice.start(list(MODELS))
        _post(f"{self.sluice.ports.management_url}/workflows?url={WORKFLOW}.war")
        self.facts["sluice"] = {
            "start_s": timing.to_ready_s,
            "with_workflow_s": time.perf_counter() - started,
            "torch_threads": self.sluice.torch_threads(),
        }
        if self.torchserve is not None:
            self.torchserve.workdir.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            timing = self.torchserve.start(list(MODELS))
            _post(f"{self.torchserve.ports.management_url}/workflows?url={WORKFLOW}.war")
            server = self.torchserve
            wait_until(
                lambda: all(server.ready_workers(f"{WORKFLOW}__{model}") >= 1 for model in MODELS),
                timeout_s=READY_TIMEOUT_S,
                interval_s=0.1,
            )
            self.facts["torchserve"] = {
                "start_s": timing.to_ready_s,
                "with_workflow_s": time.perf_counter() - started,
                "worker_omp_num_threads": sorted(set(self.torchserve_threads().values())),
            }

    def stop(self) -> None:
        self.sluice.stop()
        if self.torchserve is not None:
            self.torchserve.stop()

    def url(self, server: str) -> str:
        if server == "sluice":
            return self.sluice.ports.rest_url
        if self.torchserve is None:
            raise RuntimeError("TorchServe is not running")
        return self.torchserve.ports.rest_url

    def torchserve_threads(self) -> dict[int, str]:
        out = {}
        for role, processes in self.torchserve_roles().items():
            for process in processes:
                if role.startswith("worker:"):
                    try:
                        out[process.pid] = process.environ().get("OMP_NUM_THREADS", "")
                    except psutil.Error:
                        continue
        return out

    def sluice_roles(self) -> Roles:
        """gateway, redis, manager, standby, ``worker:<model>`` (a worker's id dropped)."""
        roles: dict[str, list[psutil.Process]] = {}
        for role, processes in self.sluice.processes().items():
            if role.startswith("worker:"):
                role = role.rsplit(":", 1)[0]
            roles.setdefault(role, []).extend(processes)
        return roles

    def torchserve_roles(self) -> Roles:
        """frontend, ``worker:<model>`` (from the management API's worker pids)."""
        if self.torchserve is None:
            return {}
        models = [*MODELS, *(f"{WORKFLOW}__{model}" for model in MODELS)]
        names: dict[int, str] = {}
        for model in models:
            try:
                described = _describe(self.torchserve.ports.management_url, model)
            except OSError:
                continue
            for version in described:
                for worker in version.get("workers", []):
                    names[int(worker.get("pid", 0))] = model
        roles: dict[str, list[psutil.Process]] = {}
        for role, processes in self.torchserve.processes().items():
            for process in processes:
                named = f"worker:{names[process.pid]}" if process.pid in names else role
                roles.setdefault(named, []).append(process)
        return roles

    def roles(self, server: str) -> Callable[[], Roles]:
        return self.sluice_roles if server == "sluice" else self.torchserve_roles


def measure_window(
    stacks: Stacks, setup: Setup, body: Request, concurrency: int, sizes: Sizes
) -> dict[str, Any]:
    monitor = ResourceMonitor(stacks.roles(setup.server)).start()
    measured = run_async(
        run_load(
            setup.form,
            stacks.url(setup.server),
            body,
            concurrency=concurrency,
            duration_s=sizes.window_s,
            warmup_s=sizes.warmup_s,
        )
    )
    usage = monitor.stop()
    record = measured.record()
    record.update(usage.as_record(measured.result.completed))
    return record


def check_setups(stacks: Stacks, setups: list[Setup], body: Request) -> None:
    """One call of each setup must give the expected answer (else the run stops here)."""
    for setup in setups:
        measured = run_async(
            run_load(setup.form, stacks.url(setup.server), body, concurrency=1, duration_s=0.5, warmup_s=0.0)
        )
        if measured.result.errors or not measured.result.completed:
            raise RuntimeError(f"{setup.key} does not answer as expected: {dict(measured.result.errors)}")


def run_rounds(
    stacks: Stacks, setups: list[Setup], body: Request, sizes: Sizes, started: float
) -> tuple[list[dict[str, Any]], bool]:
    """Every window's record, and whether the deadline cut the run short."""
    for setup in setups:
        log(f"warming {setup.key} for {sizes.server_warmup_s:g} s")
        run_async(
            run_load(
                setup.form,
                stacks.url(setup.server),
                body,
                concurrency=WARM_CONCURRENCY,
                duration_s=sizes.server_warmup_s,
                warmup_s=0.0,
            )
        )
    records: list[dict[str, Any]] = []
    for round_index in range(sizes.rounds):
        order = setups if round_index % 2 == 0 else setups[::-1]
        for setup in order:
            for concurrency in (1, *sizes.concurrency):
                if time.monotonic() - started > sizes.deadline_s:
                    log(f"deadline of {sizes.deadline_s:g} s passed: no more windows")
                    return records, True
                record = measure_window(stacks, setup, body, concurrency, sizes)
                record.update(round=round_index, setup=setup.key)
                records.append(record)
                latency = record["latency_ms"]
                log(
                    f"round {round_index + 1} {setup.key} C={concurrency}: "
                    f"{record['throughput_rps']:.1f} rps, p50 {latency.get('p50', float('nan')):.2f} ms, "
                    f"p99 {latency.get('p99', float('nan')):.2f} ms, errors {record['errors'] or 0}"
                )
    return records, False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workflows", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one short round, C=1 and C=16 (~2 minutes; ~1 without TorchServe)",
    )
    parser.add_argument("--no-torchserve", action="store_true", help="measure Sluice's setups alone")
    parser.add_argument(
        "--out", type=Path, help="results folder (default bench/results/workflows-<timestamp>)"
    )
    parser.add_argument("--report-only", type=Path, metavar="DIR", help="rebuild report.md of a run")
    args = parser.parse_args(argv)
    if args.report_only:
        print(write_report(args.report_only))
        return 0
    sizes = QUICK if args.quick else Sizes()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    started = time.monotonic()
    started_at = time.strftime("%Y-%m-%d %H:%M:%S")
    load_before = os.getloadavg()
    venv = None
    if not args.no_torchserve:
        if not tools.ensure_java():
            raise SystemExit("no Java 17: run with --no-torchserve")
        venv = tools.ensure_torchserve_venv()
    setups = [setup for setup in SETUPS if venv is not None or setup.server == "sluice"]
    out = args.out or RESULTS / f"workflows-{time.strftime('%Y%m%d-%H%M%S')}"
    for folder in ("sluice", "torchserve"):  # the previous run's servers (TorchServe's logs grow large)
        shutil.rmtree(WORK / folder, ignore_errors=True)
    store = WORK / "store"
    log("building the archives")
    build_store(store, WORK)
    body = request(WORK / "weights" / "cnn.pt")
    stacks = Stacks(store, venv)
    try:
        log("starting the servers")
        stacks.start()
        check_threads(stacks)
        check_setups(stacks, setups, body)
        records, cut = run_rounds(stacks, setups, body, sizes, started)
    finally:
        stacks.stop()
    if "torchserve" in stacks.facts:
        stacks.facts["torchserve"]["stalls"] = torchserve_stalls(WORK / "torchserve" / "logs")
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "started": started_at,
        "duration_s": time.monotonic() - started,
        "quick": args.quick,
        "cut_by_deadline": cut,
        "sizes": asdict(sizes),
        "setups": [asdict(setup) for setup in setups],
        "cores": os.cpu_count(),
        "load_average": {"start": load_before, "end": os.getloadavg()},
        "request": {
            "bytes": len(body.body),
            "expected_class": body.expected_class,
            "expected_score": body.expected_score,
            "top_two_logit_margin": body.margin,
        },
        "servers": stacks.facts,
        "records": records,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(write_report(out))
    log(f"results: {out} ({results['duration_s']:.0f} s)")
    return 0


def _log_lines(logs: Path, prefix: str, needle: str) -> list[str]:
    """The distinct lines holding ``needle`` in ``<prefix>.log`` and the files log4j rolled it into
    (``<prefix>.<date>.log.gz``; a second roll on the same day overwrites the first)."""
    lines: set[str] = set()
    for path in sorted(logs.glob(f"{prefix}*")):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except OSError:
            continue
        lines |= {line for line in raw.decode(errors="replace").splitlines() if needle in line}
    return sorted(lines)


def torchserve_stalls(logs: Path) -> dict[str, Any]:
    """From TorchServe's logs, the whole run (checks and warm-ups included): its ``/wfpredict`` calls and
    those that took ``STALL_S`` or more (access log, milliseconds last on each line), and which node
    TorchServe's DagExecutor gave up waiting for ("Timed out while executing <node>"; only in the part
    of ts_log still on disk: log4j rolls it every 100 MB, a few minutes here, and a same-day roll
    overwrites the last)."""
    durations = []
    for line in _log_lines(logs, "access_log", f"/wfpredict/{WORKFLOW} "):
        try:
            durations.append(int(line.rsplit(maxsplit=1)[1]))
        except (IndexError, ValueError):
            continue
    slow = sorted(ms for ms in durations if ms >= STALL_S * 1000)
    timeouts: dict[str, int] = {}
    for line in _log_lines(logs, "ts_log", "Timed out while executing"):
        node = line.split("Timed out while executing", 1)[1].split()[0]
        timeouts[node] = timeouts.get(node, 0) + 1
    return {
        "wfpredict_calls": len(durations),
        "wfpredict_stalled": len(slow),
        "stalled_ms": slow,
        "node_timeouts_in_kept_log": timeouts,
    }


def check_threads(stacks: Stacks) -> None:
    """The CNN's workers must run one torch thread on both servers (refuse to measure otherwise)."""
    threads = stacks.facts["sluice"]["torch_threads"]
    for model in (CNN, f"{WORKFLOW}__{CNN}"):
        if threads.get(model) != TORCH_THREADS:
            raise RuntimeError(f"Sluice gave {model} {threads.get(model)} torch threads, not {TORCH_THREADS}")
    torchserve = stacks.facts.get("torchserve")
    if torchserve is not None and torchserve["worker_omp_num_threads"] != [str(TORCH_THREADS)]:
        raise RuntimeError(f"TorchServe's workers run OMP_NUM_THREADS={torchserve['worker_omp_num_threads']}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
