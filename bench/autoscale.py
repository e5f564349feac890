"""Autoscaling under a step load: ``make bench-autoscale`` (``python -m bench.autoscale``).

The CNN (bench/models.py: ResNet-18-shaped, 3x224x224, batch size 1) served by ``sluice start`` with
worker processes, in three configurations, each on a start of its own:

- ``autoscale``: minWorkers 1, maxWorkers 3, scaling keys shortened (``Scaling``);
- ``fixed_1``: one worker; ``fixed_3``: three workers.

First the capacity: closed-loop throughput of ``fixed_1`` and ``fixed_3``. The rates follow from it
(``pick_rates``): low = ``LOW_SHARE`` of one worker's capacity, high = 80% of three workers'
capacity, kept at least 10% above one worker's. Then the same open-loop step load (bench/openloop.py:
low, high, low; requests sent at their scheduled times whatever the answers) on each configuration,
in rounds alternating their order, with the gateway's ``sluice_workers`` / ``sluice_desired_workers``
/ ``sluice_queue_depth`` gauges sampled every ``SAMPLE_EVERY_S``. Last the cold start from zero: a
start with minWorkers 0, where each repetition waits until the version has no worker, then times one
call (a worker is started for it) and a few warm calls right after.

Writes ``bench/results/<timestamp>/``: results.jsonl (every call and sample), report.md (the tables:
bench/autoscale_report.py) and plots/autoscale.png. Not a test: nothing is asserted.
"""

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.collectors import busy_seconds
from bench.loadgen import grpc_channel, grpc_unary_load, run_async
from bench.models import Variant, build_archives
from bench.openloop import Phase, open_loop, schedule
from bench.payloads import PREDICTIONS_METHOD, predictions_request, tensor_bytes
from bench.results import ResultsWriter
from bench.runner import log
from bench.servers.common import LOOPBACK, wait_until
from bench.servers.sluice import SluiceServer

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "autoscale"
RESULTS = ROOT / "results"
BATCH_SIZE = 1
CALL_TIMEOUT_S = 30.0
SAMPLE_EVERY_S = 0.25
LOW_SHARE = 0.3
HIGH_OVER_1 = 1.1
HIGH_SHARE_OF_3 = 0.8
CAPACITY_CONCURRENCY = 8
GAUGES = ("sluice_workers", "sluice_desired_workers", "sluice_queue_depth")
COLD_COUNTERS = ("sluice_cold_start_requests_total", "sluice_cold_start_wait_microseconds")
_SAMPLE = re.compile(r"^([a-z_]+)\{([^}]*)\}\s+(\S+)$")


@dataclass(frozen=True)
class Scaling:
    """The autoscaling keys of model-config.yaml (targetUtilization and targetJobsPerWorker: their
    defaults, 0.8 and 2 x batchSize)."""

    up_after_ms: int = 1000
    down_after_ms: int = 15000
    cooldown_ms: int = 5000

    def keys(self) -> dict[str, int]:
        return {
            "scaleUpAfterMSec": self.up_after_ms,
            "scaleDownAfterMSec": self.down_after_ms,
            "scaleCooldownMSec": self.cooldown_ms,
        }


@dataclass(frozen=True)
class Configuration:
    name: str
    min_workers: int
    max_workers: int
    scaling: Scaling = Scaling()

    @property
    def model(self) -> str:
        return f"cnn_{self.name}"


@dataclass(frozen=True)
class Sizes:
    low_s: float = 30.0
    high_s: float = 60.0
    after_s: float = 60.0
    rounds: int = 3
    capacity_window_s: float = 15.0
    capacity_warmup_s: float = 3.0
    cold_repetitions: int = 5
    warm_calls: int = 5
    scaling: Scaling = Scaling()
    # minWorkers 0: how soon an idle version drops to zero (the default is a minute).
    zero_scaling: Scaling = Scaling(down_after_ms=5000, cooldown_ms=1000)
    configurations: tuple[str, ...] = ("autoscale", "fixed_1", "fixed_3")

    def phases(self, low: float, high: float) -> list[Phase]:
        return [
            Phase("low", low, self.low_s),
            Phase("high", high, self.high_s),
            Phase("low", low, self.after_s),
        ]


QUICK = Sizes(
    low_s=6.0,
    high_s=20.0,
    after_s=14.0,
    rounds=1,
    capacity_window_s=4.0,
    capacity_warmup_s=1.0,
    cold_repetitions=1,
    warm_calls=3,
    scaling=Scaling(down_after_ms=5000),
)
# tests/e2e/test_bench_autoscale_smoke.py: the autoscaled configuration alone, rates given.
SMOKE = Sizes(
    low_s=2.0,
    high_s=5.0,
    after_s=3.0,
    rounds=1,
    cold_repetitions=1,
    warm_calls=2,
    scaling=Scaling(up_after_ms=300, down_after_ms=2000, cooldown_ms=500),
    configurations=("autoscale",),
)


def configuration(name: str, sizes: Sizes) -> Configuration:
    if name == "autoscale":
        return Configuration(name, 1, 3, sizes.scaling)
    if name == "from_zero":
        return Configuration(name, 0, 1, sizes.zero_scaling)
    workers = int(name.removeprefix("fixed_"))
    return Configuration(name, workers, workers)


@dataclass(frozen=True)
class ScaledCnn(Variant):
    """The CNN archive of one configuration: its worker range and scaling keys."""

    label: str = ""
    max_workers: int = 1
    scaling: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        return f"cnn_{self.label}"

    def model_config(self) -> dict[str, Any]:
        config = super().model_config()
        config["maxWorkers"] = self.max_workers
        config.update(self.scaling)
        return config


def archive_variant(config: Configuration) -> ScaledCnn:
    scaling = tuple(config.scaling.keys().items()) if config.max_workers > config.min_workers else ()
    return ScaledCnn(
        "cnn",
        batch_size=BATCH_SIZE,
        workers=config.min_workers,
        label=config.name,
        max_workers=config.max_workers,
        scaling=scaling,
    )


def request_for(model: str) -> bytes:
    return predictions_request(model, tensor_bytes((3, 224, 224)))


def pick_rates(capacity_1: float, capacity_3: float) -> tuple[float, float]:
    """(low, high) requests/s: low well under one worker's capacity; high at ``HIGH_SHARE_OF_3`` of
    three workers' capacity, but between ``HIGH_OVER_1`` times one worker's (so that it saturates)
    and 1.5 times."""
    high = max(HIGH_OVER_1 * capacity_1, min(HIGH_SHARE_OF_3 * capacity_3, 1.5 * capacity_1))
    return LOW_SHARE * capacity_1, high


# Metrics ---------------------------------------------------------------------------------------------
def metric_values(text: str, model: str, names: tuple[str, ...]) -> dict[str, float]:
    """The samples of ``names`` labelled with ``model`` in a Prometheus text page, summed by name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        matched = _SAMPLE.match(line)
        if matched and matched[1] in names and f'model_name="{model}"' in matched[2]:
            out[matched[1]] = out.get(matched[1], 0.0) + float(matched[3])
    return out


@dataclass
class Sampler:
    """Scrapes the gateway's gauges for ``model`` every ``SAMPLE_EVERY_S`` until stopped."""

    url: str
    model: str
    rows: list[tuple[float, int, int | None, int]] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=5.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not stop.is_set():
                at = time.perf_counter()
                try:
                    async with session.get(self.url) as response:
                        text = await response.text()
                except (aiohttp.ClientError, TimeoutError):
                    text = ""
                values = metric_values(text, self.model, GAUGES)
                if "sluice_workers" in values:
                    desired = values.get("sluice_desired_workers")
                    self.rows.append(
                        (
                            at,
                            int(values["sluice_workers"]),
                            None if desired is None else int(desired),
                            int(values.get("sluice_queue_depth", 0)),
                        )
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)


def metrics_url(server: SluiceServer) -> str:
    return f"http://{LOOPBACK}:{server.ports.metrics}/metrics"


# One configuration -----------------------------------------------------------------------------------
def started(config: Configuration, work: Path) -> SluiceServer:
    home = work / "sluice" / config.name
    shutil.rmtree(home, ignore_errors=True)
    server = SluiceServer(home=home, store=work / "store")
    server.start([config.model], probe=request_for(config.model) if config.min_workers else None)
    return server


async def _step_load(server: SluiceServer, model: str, phases: list[Phase]) -> dict[str, Any]:
    request = request_for(model)
    sampler = Sampler(metrics_url(server), model)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    await asyncio.sleep(2 * SAMPLE_EVERY_S)  # the workers before the load
    async with grpc_channel(server.ports.grpc_target) as channel:
        stub: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PREDICTIONS_METHOD)
        start, calls = await open_loop(
            lambda: stub(request, timeout=CALL_TIMEOUT_S), schedule(phases), call_timeout_s=CALL_TIMEOUT_S
        )
    stop.set()
    await sampling
    return {
        "phases": [asdict(phase) for phase in phases],
        "calls": [[round(c.scheduled_s, 4), round(c.sent_s, 4), round(c.ended_s, 4), c.error] for c in calls],
        "samples": [[round(at - start, 3), *rest] for at, *rest in sampler.rows],
        "client_lag_max_ms": max((c.sent_s - c.scheduled_s) * 1e3 for c in calls) if calls else None,
    }


def _own_cpu_s(server: SluiceServer) -> float:
    """CPU seconds of this process and of the stack's: its services, its live workers, and (in the
    manager's children times) the workers that exited."""
    total = 0.0
    processes = [psutil.Process(), *(p for members in server.processes().values() for p in members)]
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
            if process.pid != os.getpid():
                total += times.children_user + times.children_system
        except psutil.Error:
            continue
    return total


def noise_meter(server: SluiceServer) -> Callable[[], float]:
    """Call the result at the end of an interval: the cores other processes used during it (the
    machine's busy time less this process's and the stack's)."""
    busy, own, wall = busy_seconds(), _own_cpu_s(server), time.perf_counter()

    def foreign_cores() -> float:
        foreign = busy_seconds() - busy - (_own_cpu_s(server) - own)
        return max(foreign, 0.0) / (time.perf_counter() - wall)

    return foreign_cores


def step_run(config: Configuration, phases: list[Phase], round_: int, work: Path) -> dict[str, Any]:
    server = started(config, work)
    try:
        noise = noise_meter(server)
        measured = run_async(_step_load(server, config.model, phases))
        measured["foreign_cores"] = noise()
        measured["loadavg_end"] = os.getloadavg()
    finally:
        server.stop()
    return {
        "kind": "autoscale_run",
        "config": config.name,
        "round": round_,
        "model": config.model,
        "min_workers": config.min_workers,
        "max_workers": config.max_workers,
        "scaling": config.scaling.keys() if config.max_workers > config.min_workers else None,
        **measured,
    }


def capacity(config: Configuration, sizes: Sizes, work: Path) -> dict[str, Any]:
    """Closed-loop throughput of a fixed configuration."""
    server = started(config, work)
    try:
        noise = noise_meter(server)
        result = run_async(
            grpc_unary_load(
                server.ports.grpc_target,
                PREDICTIONS_METHOD,
                request_for(config.model),
                concurrency=CAPACITY_CONCURRENCY,
                duration_s=sizes.capacity_window_s,
                warmup_s=sizes.capacity_warmup_s,
            )
        )
        foreign_cores = noise()
    finally:
        server.stop()
    return {
        "kind": "autoscale_capacity",
        "foreign_cores": foreign_cores,
        "config": config.name,
        "workers": config.max_workers,
        "concurrency": CAPACITY_CONCURRENCY,
        "throughput_rps": result.throughput_rps,
        "errors": dict(result.errors),
    }


# Cold start from zero --------------------------------------------------------------------------------
def _gauges_now(server: SluiceServer, model: str, names: tuple[str, ...]) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(metrics_url(server), timeout=5.0) as response:
        return metric_values(response.read().decode(), model, names)


def cold_starts(sizes: Sizes, work: Path) -> list[dict[str, Any]]:
    """Each repetition: wait until the version runs no worker (and 3 s more, for the standby worker
    the process launcher refills), then one call, then ``warm_calls`` calls one after another."""
    config = configuration("from_zero", sizes)
    server = started(config, work)
    request = request_for(config.model)
    records = []
    try:
        with grpc.insecure_channel(server.ports.grpc_target) as channel:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PREDICTIONS_METHOD)

            def timed() -> float:
                begun = time.perf_counter()
                call(request, timeout=CALL_TIMEOUT_S)
                return time.perf_counter() - begun

            for repetition in range(sizes.cold_repetitions):
                idle = wait_until(
                    lambda: _gauges_now(server, config.model, GAUGES).get("sluice_workers", 0) == 0,
                    timeout_s=120.0,
                    interval_s=0.25,
                )
                time.sleep(3.0)
                before = _gauges_now(server, config.model, COLD_COUNTERS)
                cold_s = timed()
                after = _gauges_now(server, config.model, COLD_COUNTERS)
                warm = [timed() for _ in range(sizes.warm_calls)]
                counted = after.get(COLD_COUNTERS[0], 0.0) - before.get(COLD_COUNTERS[0], 0.0)
                waited_us = after.get(COLD_COUNTERS[1], 0.0) - before.get(COLD_COUNTERS[1], 0.0)
                records.append(
                    {
                        "kind": "autoscale_cold_start",
                        "repetition": repetition,
                        "waited_for_zero_s": idle,
                        "cold_s": cold_s,
                        "warm_s": warm,
                        "gateway_cold_requests": counted,
                        "gateway_cold_wait_s": waited_us / 1e6 / counted if counted else None,
                        "scaling": config.scaling.keys(),
                    }
                )
                log(f"cold start {repetition + 1}: {cold_s * 1e3:.0f} ms; warm {min(warm) * 1e3:.0f} ms")
    finally:
        server.stop()
    return records


# The whole run ---------------------------------------------------------------------------------------
def measure(
    sizes: Sizes, out: Path, *, work: Path = WORK, rates: tuple[float, float] | None = None
) -> list[dict[str, Any]]:
    """Capacity (unless ``rates`` are given), the step load on every configuration, the cold start;
    archives and server folders under ``work``. Returns the records written to ``out``."""
    configs = [configuration(name, sizes) for name in sizes.configurations]
    all_configs = [*configs, configuration("from_zero", sizes)]
    build_archives([archive_variant(config) for config in all_configs], work / "store", work / "weights")
    writer = ResultsWriter(out)
    try:
        writer.write(
            {
                "kind": "autoscale_settings",
                "sizes": asdict(sizes),
                "batch_size": BATCH_SIZE,
                "call_timeout_s": CALL_TIMEOUT_S,
                "cpus": os.cpu_count(),
                "loadavg_start": os.getloadavg(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
        if rates is None:
            found = {}
            for name in ("fixed_1", "fixed_3"):
                record = writer.write(capacity(configuration(name, sizes), sizes, work))
                found[name] = record["throughput_rps"]
                log(f"capacity {name}: {record['throughput_rps']:.1f} req/s")
            rates = pick_rates(found["fixed_1"], found["fixed_3"])
            source = "measured"
        else:
            source = "given"
        low, high = rates
        writer.write({"kind": "autoscale_rates", "low_rps": low, "high_rps": high, "source": source})
        log(f"rates: low {low:.1f} req/s, high {high:.1f} req/s ({source})")
        phases = sizes.phases(low, high)
        for round_ in range(sizes.rounds):
            for config in configs if round_ % 2 == 0 else configs[::-1]:
                log(f"round {round_ + 1}: {config.name}")
                writer.write(step_run(config, phases, round_, work))
        for record in cold_starts(sizes, work):
            writer.write(record)
        writer.write({"kind": "autoscale_end", "loadavg_end": os.getloadavg()})
    finally:
        writer.close()
    return writer.records


def main(argv: list[str] | None = None) -> int:
    from bench import autoscale_report

    parser = argparse.ArgumentParser(prog="python -m bench.autoscale", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short phases, one round (checks the bench)")
    parser.add_argument(
        "--rates", nargs=2, type=float, metavar=("LOW", "HIGH"), help="requests/s (skips the capacity step)"
    )
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>)")
    parser.add_argument("--report-only", type=Path, metavar="DIR", help="rebuild report and plot of a run")
    args = parser.parse_args(argv)
    if args.report_only:
        print(autoscale_report.write(args.report_only).read_text())
        return 0
    out = args.out or RESULTS / time.strftime("%Y%m%d-%H%M%S")
    log(f"results in {out}")
    measure(
        QUICK if args.quick else Sizes(), out, rates=(args.rates[0], args.rates[1]) if args.rates else None
    )
    print(autoscale_report.write(out).read_text())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
