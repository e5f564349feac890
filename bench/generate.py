"""Generative serving: ``make bench-generate`` (``python -m bench.generate``; ``--quick`` for a short
run, ``--no-torchserve`` for Sluice alone, ``--report-only DIR`` to rebuild a report).

The model is examples/tiny_gpt (a byte-level transformer, greedy decoding on CPU). Five systems, each
measured with N concurrent token streams (``Sizes.concurrency``), each stream a closed loop of
requests (prompts taken in turn from a fixed list, ``max_new_tokens`` fixed) for a warm-up and a
measured window (bench/generate_load.py):

- ``sluice_grpc``: Sluice serving ``tiny_gpt.mar`` (continuous batching), TorchServe gRPC
  ``StreamPredictions``;
- ``sluice_rest``: the same Sluice and model, REST ``POST /predictions/tiny_gpt`` read chunk by chunk;
- ``torchserve_rest``: TorchServe 0.12 serving the same ``tiny_gpt.mar``, REST (its continuous batching
  over gRPC streaming drops a request after its first token, so it is compared over REST only);
- ``sluice_plain``: Sluice serving ``tiny_gpt_plain.mar``: no continuous batching, the plain streaming
  handler (examples/tiny_gpt/stream_handler.py) generates one request per handler call, so each
  stream has the worker to itself (gRPC ``StreamPredictions``);
- ``inprocess``: the limit, ``examples.tiny_gpt.reference.drive`` (the same handler, TorchServe's
  schedule, no server) with the same batch size and the request count the ``sluice_grpc`` cell at
  that concurrency completed (bench/generate_limit.py).

Sluice (one start serving both archives: one worker each) and TorchServe (minWorkers = maxWorkers =
1) run at once, each idle while another system is measured, in rounds alternating the systems' order
(A B C D E, E D C B A, ...). Every model runs with the same torch threads (``Sizes.torch_threads``,
1: the other core is left to the gateway, Redis, TorchServe's frontend and the client): Sluice gives a
new worker ``cores // workers planned`` (2 // 2 here; a worker placed before the second model was
planned got both cores, and is restarted: :func:`even_sluice_threads`; the launch records are checked
and the run stops if they still differ), TorchServe's workers get ``OMP_NUM_THREADS``, the limit
calls ``torch.set_num_threads``. Prompts are picked so that no generation stops at EOS before
``max_new_tokens`` (TorchServe's REST hangs when a request's first response is also its last), and
every streamed text is checked against the model run in-process: a wrong token is an error.

Each cell records the CPU time of every process by role (gateway, worker, Redis, TorchServe's
frontend and worker, the client), the cores other processes used meanwhile (noise), and for Sluice
the Redis commands executed (``INFO commandstats`` around the cell), each divided by the tokens the
cell streamed. Before the rounds, the limit is run at the highest concurrency with each batch size of
``Sizes.sweep_batches`` (which batch size is best for the handler alone).

Writes ``bench/results/<timestamp>/``: results.jsonl (every cell of every round), report.md and
summary.json (bench/generate_report.py). Not a test: nothing is asserted.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from bench import collectors, tools
from bench.generate_load import Prompts, StreamLoad, grpc_streams, rest_streams, summarize
from bench.loadgen import run_async
from bench.results import ResultsWriter
from bench.runner import log
from bench.servers.sluice import SluiceServer
from bench.servers.torchserve import TorchServeServer

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
WORK = ROOT / ".work" / "generate"
RESULTS = ROOT / "results"
CB_MODEL, PLAIN_MODEL = "tiny_gpt", "tiny_gpt_plain"
SYSTEMS = ("sluice_grpc", "sluice_rest", "torchserve_rest", "sluice_plain", "inprocess")
LABELS = {
    "sluice_grpc": "Sluice, continuous batching, gRPC",
    "sluice_rest": "Sluice, continuous batching, REST",
    "torchserve_rest": "TorchServe 0.12, continuous batching, REST",
    "sluice_plain": "Sluice, no continuous batching, gRPC",
    "inprocess": "in-process limit (reference.drive)",
}
# Tried in this order; the first ``Sizes.prompts`` whose generation streams max_new_tokens tokens
# without reaching EOS are used (with the default seed, 23 of these do for 64 tokens).
CANDIDATE_PROMPTS = (
    "The quick brown fox",
    "Hello, world",
    "In the beginning",
    "To be or not to be",
    "Write a poem about the sea",
    "Tokens per second",
    "Houston, we have a problem",
    "May the force be with you",
    "A tiny GPT model",
    "Call me Ishmael",
    "All happy families",
    "Knock knock",
    "The slow brown fox",
    "a b c d e f",
    "abc",
    "Zebra",
)
LIMIT_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Sizes:
    concurrency: tuple[int, ...] = (1, 8, 32, 64)
    window_s: float = 12.0
    warmup_s: float = 3.0
    rounds: int = 3
    max_new_tokens: int = 64
    prompts: int = 8
    batch_size: int = 8
    max_batch_delay_ms: int = 5
    torch_threads: int = 1
    # Each system's load before the first round (TorchServe's JVM warms up), at the concurrency
    # nearest 8.
    system_warmup_s: float = 8.0
    sweep_batches: tuple[int, ...] = (8, 16, 32)
    sweep_requests: int = 192
    call_timeout_s: float = 120.0
    systems: tuple[str, ...] = SYSTEMS


QUICK = Sizes(
    concurrency=(1, 8, 64), window_s=5.0, warmup_s=1.5, rounds=2, system_warmup_s=3.0, sweep_requests=64
)
# tests/e2e/test_bench_generate_smoke.py: Sluice and the limit, tiny windows.
SMOKE = Sizes(
    concurrency=(1, 4),
    window_s=1.5,
    warmup_s=0.5,
    rounds=1,
    max_new_tokens=16,
    prompts=4,
    batch_size=4,
    system_warmup_s=0.5,
    sweep_batches=(4,),
    sweep_requests=8,
    call_timeout_s=60.0,
    systems=("sluice_grpc", "sluice_rest", "sluice_plain", "inprocess"),
)


def pick_prompts(sizes: Sizes) -> Prompts:
    """The first ``sizes.prompts`` candidates whose greedy generation streams ``max_new_tokens``
    printable tokens (no EOS), with the text each must stream."""
    from examples.tiny_gpt import reference

    texts: list[str] = []
    expected: list[str] = []
    for prompt in CANDIDATE_PROMPTS:
        tokens = reference.generate(prompt, sizes.max_new_tokens)
        if len(tokens) == sizes.max_new_tokens and "" not in tokens:
            texts.append(prompt)
            expected.append("".join(tokens))
        if len(texts) == sizes.prompts:
            break
    if len(texts) < sizes.prompts:
        raise RuntimeError(
            f"only {len(texts)} candidate prompts stream {sizes.max_new_tokens} tokens without EOS"
        )
    return Prompts(tuple(texts), sizes.max_new_tokens, tuple(expected))


# CPU by role --------------------------------------------------------------------------------------
Roles = dict[str, list[psutil.Process]]


def sluice_roles(server: SluiceServer, model: str | None) -> Roles:
    """gateway / redis / manager, ``worker`` (the measured model's), ``idle worker`` (the other
    model's and the standby)."""
    roles: Roles = {}
    for role, processes in server.processes().items():
        if role.startswith("worker:"):
            name = "worker" if role.split(":")[1] == model else "idle worker"
        elif role == "standby":
            name = "idle worker"
        else:
            name = role
        roles.setdefault(name, []).extend(processes)
    return roles


def torchserve_roles(server: TorchServeServer) -> Roles:
    roles: Roles = {}
    for role, processes in server.processes().items():
        roles.setdefault("worker" if role.startswith("worker:") else role, []).extend(processes)
    return roles


@dataclass
class CpuMeter:
    """CPU seconds of every role (and of this process's waited-for children, as ``children``) over an
    interval, and the cores the rest of the machine used meanwhile."""

    roles: Roles
    _cpu: dict[str, float] = field(default_factory=dict)
    _children: float = 0.0
    _busy: float = 0.0
    _wall: float = 0.0

    def __post_init__(self) -> None:
        self.roles = {"client": [psutil.Process(os.getpid())], **self.roles}
        self._cpu = collectors.cpu_seconds(self.roles)
        self._children = _children_cpu_s()
        self._busy = collectors.busy_seconds()
        self._wall = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self._wall
        end = collectors.cpu_seconds(self.roles)
        cpu = {role: max(0.0, end.get(role, 0.0) - self._cpu.get(role, 0.0)) for role in end}
        cpu["children"] = max(0.0, _children_cpu_s() - self._children)
        foreign = max(0.0, collectors.busy_seconds() - self._busy - sum(cpu.values()))
        return {"wall_s": wall, "cpu_s": cpu, "foreign_cores": foreign / wall if wall > 0 else 0.0}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def per_token(values: dict[str, float], tokens: int, scale: float = 1.0) -> dict[str, float]:
    return {name: value * scale / tokens for name, value in values.items()} if tokens > 0 else {}


# The servers --------------------------------------------------------------------------------------
@dataclass
class Stack:
    """The servers of a run and what the cells need from them."""

    sizes: Sizes
    prompts: Prompts
    sluice: SluiceServer | None = None
    torchserve: TorchServeServer | None = None
    # Requests the sluice_grpc cell completed in its window, by concurrency (the limit's count).
    completed: dict[int, int] = field(default_factory=dict)

    def all_processes(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        if self.sluice is not None:
            found += [p for members in self.sluice.processes().values() for p in members]
        if self.torchserve is not None:
            found += [p for members in self.torchserve.processes().values() for p in members]
        return found

    def roles(self, system: str) -> Roles:
        """The measured server's roles, and every other server process as ``idle server``."""
        measured: Roles = {}
        if system.startswith("sluice") and self.sluice is not None:
            measured = sluice_roles(self.sluice, PLAIN_MODEL if system == "sluice_plain" else CB_MODEL)
        elif system == "torchserve_rest" and self.torchserve is not None:
            measured = torchserve_roles(self.torchserve)
        pids = {p.pid for members in measured.values() for p in members}
        idle = [p for p in self.all_processes() if p.pid not in pids]
        return {**measured, "idle server": idle} if idle else measured

    def stop(self) -> None:
        for server in (self.torchserve, self.sluice):
            if server is not None:
                server.stop()


def build_store(sizes: Sizes, store: Path) -> None:
    from examples.tiny_gpt.archive import build_archive

    build_archive(
        store,
        CB_MODEL,
        batch_size=sizes.batch_size,
        max_batch_delay_ms=sizes.max_batch_delay_ms,
        max_new_tokens=sizes.max_new_tokens,
        force=True,
    )
    build_archive(store, PLAIN_MODEL, max_new_tokens=sizes.max_new_tokens, force=True)


def scale_sluice(server: SluiceServer, model: str, workers: int) -> None:
    """Management API: ``PUT /models/<model>?min_worker=N&max_worker=N&synchronous=true``."""
    url = (
        f"{server.ports.management_url}/models/{model}"
        f"?min_worker={workers}&max_worker={workers}&synchronous=true"
    )
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=300) as answer:
        answer.read()


def even_sluice_threads(server: SluiceServer, threads: int) -> dict[str, int]:
    """Sluice gives a new worker ``cores // workers planned`` torch threads; the first model's worker
    is placed before the second model is registered, so it gets all the cores. Its worker is
    restarted (scaled to 0, then 1) once both are planned. Returns the threads after."""
    found = server.torch_threads()
    for model, count in found.items():
        if count != threads:
            log(f"sluice gave {model} {count} torch threads: restarting its worker")
            scale_sluice(server, model, 0)
            scale_sluice(server, model, 1)
    return server.torch_threads()


def torchserve_threads(server: TorchServeServer) -> dict[str, str]:
    """Worker pid -> OMP_NUM_THREADS in its environment (what its torch starts with)."""
    out = {}
    for process in torchserve_roles(server).get("worker", []):
        try:
            out[str(process.pid)] = process.environ().get("OMP_NUM_THREADS", "")
        except psutil.Error:
            continue
    return out


def start_stack(sizes: Sizes, prompts: Prompts, work: Path) -> tuple[Stack, dict[str, Any]]:
    """Archives, then Sluice and (when a TorchServe system is measured) TorchServe; what was checked
    about their threads."""
    store = work / "store"
    build_store(sizes, store)
    stack = Stack(sizes, prompts)
    facts: dict[str, Any] = {}
    try:
        if any(system.startswith("sluice") for system in sizes.systems):
            home = work / "sluice"
            shutil.rmtree(home, ignore_errors=True)
            stack.sluice = SluiceServer(home=home, store=store)
            started = stack.sluice.start([CB_MODEL, PLAIN_MODEL])
            threads = even_sluice_threads(stack.sluice, sizes.torch_threads)
            facts["sluice"] = {"start_s": started.to_ready_s, "torch_threads": threads}
            log(f"sluice up in {started.to_ready_s:.1f} s; torch threads {threads}")
            wrong = {model: count for model, count in threads.items() if count != sizes.torch_threads}
            if wrong:
                raise RuntimeError(
                    f"Sluice gave its workers {wrong} torch threads, the run is set for "
                    f"{sizes.torch_threads} (Sluice gives each worker cores // workers)"
                )
        if "torchserve_rest" in sizes.systems:
            venv = tools.ensure_torchserve_venv()
            facts["java"] = tools.ensure_java()
            workdir = work / "torchserve"
            shutil.rmtree(workdir, ignore_errors=True)
            stack.torchserve = TorchServeServer(
                venv=venv,
                workdir=workdir,
                store=store,
                extra_env={"OMP_NUM_THREADS": str(sizes.torch_threads)},
            )
            started = stack.torchserve.start([CB_MODEL])
            facts["torchserve"] = {
                "start_s": started.to_ready_s,
                "worker_omp_num_threads": torchserve_threads(stack.torchserve),
            }
            log(f"torchserve up in {started.to_ready_s:.1f} s")
    except BaseException:
        stack.stop()
        raise
    return stack, facts


# Cells --------------------------------------------------------------------------------------------
def load_for(stack: Stack, system: str, concurrency: int, window_s: float, warmup_s: float) -> StreamLoad:
    sizes = stack.sizes
    common: dict[str, Any] = {
        "concurrency": concurrency,
        "duration_s": window_s,
        "warmup_s": warmup_s,
        "call_timeout_s": sizes.call_timeout_s,
    }
    if system in ("sluice_grpc", "sluice_plain"):
        assert stack.sluice is not None
        model = CB_MODEL if system == "sluice_grpc" else PLAIN_MODEL
        return run_async(grpc_streams(stack.sluice.ports.grpc_target, model, stack.prompts, **common))
    server = stack.sluice if system == "sluice_rest" else stack.torchserve
    assert server is not None
    url = f"{server.ports.rest_url}/predictions/{CB_MODEL}"
    return run_async(rest_streams(url, stack.prompts, **common))


def server_cell(stack: Stack, system: str, concurrency: int, round_: int) -> dict[str, Any]:
    sizes = stack.sizes
    redis_url = stack.sluice.redis_url if system.startswith("sluice") and stack.sluice else None
    if redis_url is not None:
        collectors.reset_redis_commands(redis_url)
    meter = CpuMeter(stack.roles(system))
    load = load_for(stack, system, concurrency, sizes.window_s, sizes.warmup_s)
    usage = meter.stop()
    summary = summarize(load)
    tokens = int(summary["tokens_total"])
    record: dict[str, Any] = {
        "kind": "generate_cell",
        "system": system,
        "round": round_,
        **summary,
        **usage,
        "cpu_us_per_token": per_token(usage["cpu_s"], tokens, 1e6),
    }
    if redis_url is not None:
        record["redis_commands_per_token"] = per_token(
            {k: float(v) for k, v in collectors.redis_commands(redis_url).items()}, tokens
        )
    if system == "sluice_grpc":
        stack.completed[concurrency] = int(summary["requests_completed_in_window"])
    return record


def limit_spec(stack: Stack, concurrency: int, batch_size: int, requests: int) -> dict[str, Any]:
    return {
        "prompts": list(stack.prompts.texts),
        "max_new_tokens": stack.sizes.max_new_tokens,
        "requests": requests,
        "concurrency": concurrency,
        "batch_size": batch_size,
        "threads": stack.sizes.torch_threads,
    }


def run_limit(stack: Stack, spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The limit in a process of its own: its figures and the CPU of the interval."""
    meter = CpuMeter(stack.roles("inprocess"))
    done = subprocess.run(
        [sys.executable, "-m", "bench.generate_limit", json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=LIMIT_TIMEOUT_S,
        check=False,
    )
    usage = meter.stop()
    if done.returncode != 0:
        raise RuntimeError(f"bench.generate_limit exited with {done.returncode}: {done.stderr[-2000:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured, usage


def limit_requests(stack: Stack, concurrency: int) -> int:
    """The request count of the sluice_grpc cell at this concurrency (its latest round), else what a
    window takes at the limit's speed measured in the sweep."""
    slots = min(concurrency, stack.sizes.batch_size)
    count = stack.completed.get(concurrency)
    if count is None:
        count = int(stack.sizes.window_s * 2000 / stack.sizes.max_new_tokens)
    return max(count, 2 * slots)


def limit_cell(stack: Stack, concurrency: int, round_: int) -> dict[str, Any]:
    spec = limit_spec(stack, concurrency, stack.sizes.batch_size, limit_requests(stack, concurrency))
    measured, usage = run_limit(stack, spec)
    tokens = int(measured["tokens_total"])
    # The limit's own process: the driver's CPU (its start-up, torch's import, left out).
    cpu = {**usage["cpu_s"], "worker": float(measured["cpu_s"])}
    return {
        "kind": "generate_cell",
        "system": "inprocess",
        "round": round_,
        **measured,
        **usage,
        "cpu_s": cpu,
        "cpu_us_per_token": per_token({"worker": float(measured["cpu_s"])}, tokens, 1e6),
        "duration_s": measured["steady_s"],
        "errors_total": sum(measured["errors"].values()),
    }


def cell(stack: Stack, system: str, concurrency: int, round_: int) -> dict[str, Any]:
    if system == "inprocess":
        return limit_cell(stack, concurrency, round_)
    return server_cell(stack, system, concurrency, round_)


def describe(record: dict[str, Any]) -> str:
    ttft, itl = record.get("ttft_ms", {}), record.get("itl_ms", {})
    return (
        f"{record['system']} C={record['concurrency']} round {record['round'] + 1}: "
        f"{record.get('tokens_per_s', 0):,.0f} tok/s, TTFT p50 {ttft.get('p50', float('nan')):.1f} "
        f"p99 {ttft.get('p99', float('nan')):.1f} ms, ITL p50 {itl.get('p50', float('nan')):.2f} "
        f"p99 {itl.get('p99', float('nan')):.2f} ms, errors {record.get('errors_total', 0)}, "
        f"other processes {record.get('foreign_cores', 0):.2f} cores"
    )


def rounds_order(sizes: Sizes, round_: int) -> list[tuple[str, int]]:
    """Round 1 runs every system's cells in order (A B C D E, each over the concurrencies), round 2
    the reverse, and so on."""
    cells = [(system, concurrency) for system in sizes.systems for concurrency in sizes.concurrency]
    return cells if round_ % 2 == 0 else cells[::-1]


def measure(
    sizes: Sizes, out: Path, *, work: Path = WORK, on_record: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """The whole run; returns the records written to ``out/results.jsonl``."""
    prompts = pick_prompts(sizes)
    writer = ResultsWriter(out)
    stack: Stack | None = None

    def write(record: dict[str, Any]) -> None:
        written = writer.write(record)
        if on_record is not None:
            on_record(written)

    try:
        write(
            {
                "kind": "generate_settings",
                "sizes": asdict(sizes),
                "prompts": list(prompts.texts),
                "cpus": os.cpu_count(),
                "loadavg_start": os.getloadavg(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "started_unix": time.time(),
            }
        )
        stack, facts = start_stack(sizes, prompts, work)
        write({"kind": "generate_servers", **facts})
        if "inprocess" in sizes.systems:
            for batch in sizes.sweep_batches:
                top = max(sizes.concurrency)
                measured, usage = run_limit(stack, limit_spec(stack, top, batch, sizes.sweep_requests))
                write({"kind": "generate_sweep", **measured, "foreign_cores": usage["foreign_cores"]})
                log(f"limit sweep: batch {batch}, C={top}: {measured['tokens_per_s']:,.0f} tok/s")
        warm_c = min(sizes.concurrency, key=lambda c: abs(c - 8))
        for system in sizes.systems:
            if system != "inprocess" and sizes.system_warmup_s > 0:
                load = load_for(stack, system, warm_c, sizes.system_warmup_s, 0.0)
                summary = summarize(load)
                write({"kind": "generate_warmup", "system": system, **summary})
                log(f"warm-up {system}: {summary['tokens_per_s']:,.0f} tok/s")
        for round_ in range(sizes.rounds):
            for system, concurrency in rounds_order(sizes, round_):
                try:
                    record = cell(stack, system, concurrency, round_)
                except Exception as exc:  # a failed cell is recorded; the run goes on
                    record = {
                        "kind": "generate_error",
                        "system": system,
                        "concurrency": concurrency,
                        "round": round_,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                    log(f"{system} C={concurrency} round {round_ + 1} failed: {record['error']}")
                else:
                    log(describe(record))
                write(record)
        write(
            {
                "kind": "generate_end",
                "loadavg_end": os.getloadavg(),
                "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                "finished_unix": time.time(),
            }
        )
    finally:
        if stack is not None:
            stack.stop()
        writer.close()
    return writer.records


def main(argv: list[str] | None = None) -> int:
    from bench import generate_report

    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 s windows, C = 1, 8, 64, 2 rounds")
    parser.add_argument("--no-torchserve", action="store_true", help="measure Sluice and the limit alone")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument("--batch-size", type=int, help="continuous batching batchSize (default 8)")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>)")
    parser.add_argument("--report-only", type=Path, metavar="DIR", help="rebuild the report of a run")
    args = parser.parse_args(argv)
    if args.report_only:
        print(generate_report.write(args.report_only).read_text())
        return 0
    sizes = QUICK if args.quick else Sizes()
    changes: dict[str, Any] = {}
    if args.no_torchserve:
        changes["systems"] = tuple(system for system in sizes.systems if system != "torchserve_rest")
    if args.rounds:
        changes["rounds"] = args.rounds
    if args.batch_size:
        changes["batch_size"] = args.batch_size
    sizes = replace(sizes, **changes)
    out = args.out or RESULTS / time.strftime("%Y%m%d-%H%M%S")
    log(f"results in {out}")
    measure(sizes, out)
    print(generate_report.write(out).read_text())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
