"""Runs a :class:`bench.matrix.Plan`: builds the archives, measures the in-process limit, cold start
and register-to-READY of each server, then every group's cells, then the two servers head to head;
writes ``results.jsonl``, then the report and plots. Every cell is bounded in time; a failing cell
or server start becomes an ``error`` record and the run goes on."""

import contextlib
import functools
import resource
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import collectors, extras, head_to_head, loadgen, models, registration, tools
from bench.cells import of_kind
from bench.drive import drive
from bench.matrix import Group, HeadToHead, InprocessWindow, LoadCell, Plan
from bench.models import Variant
from bench.payloads import (
    PREDICTIONS_METHOD,
    STREAM_PREDICTIONS_METHOD,
    Payloads,
)
from bench.registration import REGISTER_MODEL
from bench.results import ResultsWriter
from bench.servers.common import Server, predict
from bench.servers.floor import FloorServer
from bench.servers.inprocess import measure as measure_inprocess
from bench.servers.sluice import SluiceServer
from bench.servers.torchserve import TorchServeServer
from bench.stats import spread


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Runner:
    plan: Plan
    out_dir: Path
    work_dir: Path
    torchserve_venv: Path | None = None
    writer: ResultsWriter = field(init=False)
    variants: dict[str, Variant] = field(default_factory=dict)
    payloads: dict[str, Payloads] = field(default_factory=dict)
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self.writer = ResultsWriter(self.out_dir)
        self.store = self.work_dir / "model-store"
        self.weights = self.work_dir / "weights"
        self._deadline = time.monotonic() + self.plan.deadline_s

    # ---- the run -------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        # The previous run's server folders (homes, logs) go: a full run leaves ~3 GB there, most of
        # it TorchServe's log. This run's stay for a look afterwards.
        shutil.rmtree(self.work_dir / "servers", ignore_errors=True)
        self.writer.write(tools.environment(self.plan, "start"))
        log(f"building archives into {self.store}")
        built = models.build_archives(self.plan.variants(), self.store, self.weights)
        self.variants = {variant.name: variant for variant in self.plan.variants()}
        for name, variant in self.variants.items():
            self.payloads[name] = Payloads.build(name, variant.shape)
        self.writer.write({"kind": "archives", "archives": {k: str(v) for k, v in built.items()}})
        self._step("in-process limit", self.inprocess)
        servers = ["sluice", *(["torchserve"] if self.plan.with_torchserve else [])]
        for server in servers:
            if self.plan.cold_start_reps:
                self._step(f"{server} cold start", functools.partial(self.cold_start, server))
            if self.plan.register_reps:
                self._step(f"{server} register", functools.partial(self.register, server))
        for group in self.plan.groups:
            self._step(f"{group.server} group {group.label}", functools.partial(self.run_group, group))
        if self.plan.head_to_head is not None:
            self._step("head to head", functools.partial(self.run_head_to_head, self.plan.head_to_head))
        self.writer.write(tools.environment(self.plan, "end"))
        self.writer.close()
        return self.writer.records

    def _step(self, label: str, action: Callable[[], None]) -> None:
        if time.monotonic() > self._deadline:
            self.writer.write(
                {"kind": "error", "step": label, "error": "skipped: the run's time bound passed"}
            )
            return
        log(label)
        try:
            action()
        except Exception as exc:  # a failing step is a result, not the end of the run
            log(f"{label} failed: {exc}")
            self.writer.write(
                {
                    "kind": "error",
                    "step": label,
                    "error": str(exc)[-2000:],
                    "trace": traceback.format_exc()[-4000:],
                }
            )

    # ---- in-process limit ----------------------------------------------------------------------
    def inprocess(self) -> None:
        for kind, batches, seconds in self.plan.inprocess:
            for rep in range(self.plan.reps):
                for result in self._measure_inprocess(kind, batches, seconds, min(1.0, seconds)):
                    self.writer.write({"kind": "inprocess", "model": kind, "rep": rep, **result})

    def _inprocess_window(self, group: Group, window: InprocessWindow, round_: int) -> None:
        (result,) = self._measure_inprocess(window.model, (window.batch,), window.duration_s, window.warmup_s)
        self.writer.write(
            {
                "kind": "inprocess",
                "model": window.model,
                "rep": round_,
                "section": "paired",
                "group": group.label,
                **result,
            }
        )
        log(
            f"  in-process {window.model} batch {window.batch} round {round_}: "
            f"{result['inferences_per_s']:,.1f} inf/s"
        )

    def _measure_inprocess(
        self, kind: str, batches: tuple[int, ...], seconds: float, warmup_s: float
    ) -> list[dict[str, Any]]:
        variant = Variant(kind)
        data_file = self.work_dir / f"{kind}.input"
        data_file.write_bytes(self.payloads[variant.name].data)
        archive = self.store / f"{variant.name}.mar"
        return measure_inprocess(archive, data_file, batches, seconds, warmup_s)

    # ---- servers -------------------------------------------------------------------------------
    def _server(self, kind: str, label: str) -> Server:
        folder = self.work_dir / "servers" / f"{kind}-{label}-{time.time_ns()}"
        if kind == "sluice":
            return SluiceServer(home=folder, store=self.store)
        if self.torchserve_venv is None:
            raise RuntimeError("TorchServe is not installed for this run")
        folder.mkdir(parents=True, exist_ok=True)
        return TorchServeServer(venv=self.torchserve_venv, workdir=folder, store=self.store)

    @contextlib.contextmanager
    def _running(self, server: Server, group_models: list[str], **start: Any) -> Iterator[Any]:
        try:
            timing = server.start(group_models, **start)
        except RuntimeError as exc:
            # One retry: a start can fail for reasons outside the server (a port taken meanwhile);
            # the failure is recorded either way.
            self.writer.write(
                {"kind": "error", "step": f"{server.name} start (retried)", "error": str(exc)[-2000:]}
            )
            timing = server.start(group_models, **start)
        try:
            yield timing
        finally:
            server.stop()

    def cold_start(self, kind: str) -> None:
        for rep in range(self.plan.cold_start_reps):
            server = self._server(kind, "cold")
            with self._running(server, []) as timing:
                time.sleep(1.0)
                rss = collectors.rss_mib(server.processes())
            self.writer.write(
                {"kind": "cold_start", "server": kind, "rep": rep, **asdict(timing), "rss_idle_mib": rss}
            )

    def register(self, kind: str) -> None:
        if REGISTER_MODEL not in self.payloads:
            self.payloads[REGISTER_MODEL] = Payloads.build(REGISTER_MODEL, Variant("mlp").shape)
        probe = self.payloads[REGISTER_MODEL].predictions
        for rep in range(self.plan.register_reps):
            server = self._server(kind, "register")
            with self._running(server, [REGISTER_MODEL], probe=probe) as timing:
                cold = spread(
                    r.get("to_healthy_s") for r in of_kind(self.writer.records, "cold_start", server=kind)
                )
                if timing.to_first_prediction_s is not None and cold.count:
                    # Start with the model until it predicts, less this server's own cold start.
                    self._register_record(
                        kind,
                        rep,
                        "startup",
                        to_first_prediction_s=timing.to_first_prediction_s,
                        cold_start_s=cold.median,
                        to_ready_s=timing.to_first_prediction_s - cold.median,
                    )
                seconds = registration.time_grpc_register(server, REGISTER_MODEL, probe)
                if seconds is None:
                    log(f"{server.name}: no gRPC management API")
                else:
                    self._register_record(kind, rep, "grpc management API", to_ready_s=seconds)

    def _register_record(self, kind: str, rep: int, method: str, **measured: float) -> None:
        self.writer.write({"kind": "register", "server": kind, "rep": rep, "method": method, **measured})

    # ---- groups --------------------------------------------------------------------------------
    def run_group(self, group: Group) -> None:
        server = self._server(group.server, group.label)
        names = list(group.models)
        models_json: dict[str, Any] | None = None
        if group.idle_models:
            names = [name for name in names if name != "idle"]
            idle = [f"idle{index:03d}" for index in range(group.idle_models)]
            names += [f"{name}=idle.mar" for name in idle]
            models_json = {name: {models.MODEL_VERSION: {"minWorkers": 0, "maxWorkers": 0}} for name in idle}
        with self._running(server, names, models_json=models_json) as timing:
            self.writer.write(
                {
                    "kind": "start",
                    "server": group.server,
                    "group": group.label,
                    "models": len(names),
                    **asdict(timing),
                }
            )
            time.sleep(1.0)
            self.writer.write(
                {
                    "kind": "rss",
                    "server": group.server,
                    "group": group.label,
                    "phase": "idle",
                    "rss_mib": collectors.rss_mib(server.processes()),
                }
            )
            if group.warmup_s:
                self._warm_up(server, group)
            repeated = [(rep, cell) for rep in range(self.plan.reps) for cell in group.cells]
            for rep, item in [*repeated, *group.paired]:
                if time.monotonic() > self._deadline:
                    raise RuntimeError("the run's time bound passed")
                if isinstance(item, InprocessWindow):
                    self._inprocess_window(group, item, rep)
                else:
                    self._cell(server, group, item, rep)
            if group.soak_s:
                self._soak(server, group)
            if group.held_streams and isinstance(server, SluiceServer):
                self._held_streams(server, group)
            if self.plan.profile_s and group.server == "sluice" and group.label == "mlp":
                self._profiles(server, group)

    def run_head_to_head(self, plan: HeadToHead) -> None:
        """Both servers up at once, each with the archives of its picked cells; TorchServe warmed
        up; the gRPC floor started with Sluice's answer to the base request, to run Sluice's cells;
        then the rounds, each server's cells in turn (see :mod:`bench.head_to_head`)."""
        picked = {
            name: [
                cell
                for cell in head_to_head.picked_cells(self.writer.records, name, plan)
                if self.plan.with_h2load or cell.client != "h2load"
            ]
            for name in head_to_head.SERVERS
        }
        picked[head_to_head.FLOOR] = picked["sluice"]
        servers = {name: self._server(name, head_to_head.SECTION) for name in head_to_head.SERVERS}
        groups = {
            name: Group(
                name,
                head_to_head.SECTION,
                tuple(self.variants[model] for model in dict.fromkeys(cell.model for cell in cells)),
                tuple(cells),
                warmup_s=plan.server_warmup_s if name == "torchserve" else 0.0,
            )
            for name, cells in picked.items()
        }
        with contextlib.ExitStack() as running:
            for name, server in servers.items():
                running.enter_context(self._running(server, groups[name].models))
            answer = predict(
                servers["sluice"].ports.grpc_target, self.payloads[head_to_head.BASE_VARIANT].predictions
            )
            servers[head_to_head.FLOOR] = FloorServer(
                self.work_dir / "servers" / f"floor-{time.time_ns()}", answer
            )
            running.enter_context(self._running(servers[head_to_head.FLOOR], []))
            for name, server in servers.items():
                if groups[name].warmup_s:
                    self._warm_up(server, groups[name])
            for round_ in range(plan.rounds):
                for name in head_to_head.round_order(round_):
                    for cell in groups[name].cells:
                        if time.monotonic() > self._deadline:
                            raise RuntimeError("the run's time bound passed")
                        self._cell(servers[name], groups[name], cell, round_)

    def _warm_up(self, server: Server, group: Group) -> None:
        """Load on each of the group's archives in turn, ``group.warmup_s`` in all: the JVM compiles
        what each path runs (warmed on the batch-1 archive alone, TorchServe's batch-8 archive ran at
        2,232 req/s in the first round after and 3,138 in the next)."""
        log(f"warming {server.name} up for {group.warmup_s:g} s")
        for variant in group.variants:
            stream = variant.kind == "stream"
            load = loadgen.grpc_stream_load if stream else loadgen.grpc_unary_load
            loadgen.run_async(
                load(
                    server.ports.grpc_target,
                    STREAM_PREDICTIONS_METHOD if stream else PREDICTIONS_METHOD,
                    self.payloads[variant.name].predictions,
                    concurrency=16,
                    duration_s=group.warmup_s / len(group.variants),
                    warmup_s=0.0,
                )
            )

    def _cell_record(self, server: Server, group: Group, cell: LoadCell, rep: int) -> dict[str, Any]:
        variant = self.variants[cell.model]
        return {
            "kind": "load",
            "server": server.name,
            "group": group.label,
            "section": cell.section,
            "api": cell.api,
            "client": cell.client,
            "model": variant.kind,
            "variant": variant.name,
            "batching": variant.batching,
            "workers": variant.workers,
            "concurrency": cell.concurrency,
            "rep": rep,
            "pin_client": cell.pin_client,
            "idle_models": group.idle_models,
        }

    def _cell(self, server: Server, group: Group, cell: LoadCell, rep: int) -> None:
        record = self._cell_record(server, group, cell, rep)
        redis_url = server.redis_url if isinstance(server, SluiceServer) else None
        if redis_url is not None:
            collectors.reset_redis_commands(redis_url)
        monitor = collectors.ResourceMonitor(server.processes).start()
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            measured = drive(server.ports, cell, self.payloads[cell.model], self.work_dir)
        except Exception as exc:
            monitor.stop()
            self.writer.write(
                {**record, "kind": "error", "step": "load cell", "error": f"{type(exc).__name__}: {exc}"}
            )
            return
        usage = monitor.stop()
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cell.client == "h2load" or cell.pin_client:
            # The client ran as a child process: its CPU shows in RUSAGE_CHILDREN.
            usage.cpu_s["client"] = (children_after.ru_utime + children_after.ru_stime) - (
                children_before.ru_utime + children_before.ru_stime
            )
        record.update(measured)
        # The monitor covered the whole cell (warm-up and tail too): divide by every answer in it.
        answered = int(measured.get("completed", measured.get("requests", 0)))
        record.update(usage.as_record(answered))
        if redis_url is not None and answered > 0:
            calls = collectors.redis_commands(redis_url)
            record["redis_commands_per_req"] = {name: count / answered for name, count in calls.items()}
        self.writer.write(record)
        log(
            f"  {server.name} {cell.api}/{cell.client} {cell.model} C={cell.concurrency} rep {rep}: "
            f"{measured.get('throughput_rps', 0):,.0f} req/s "
            f"p50 {measured.get('latency_ms', {}).get('p50', float('nan')):.2f} ms"
            f" errors {sum(measured.get('errors', {}).values())}"
        )

    # ---- extras --------------------------------------------------------------------------------
    def _soak(self, server: Server, group: Group) -> None:
        if not isinstance(server, SluiceServer):
            return
        variant = group.variants[0]
        before = collectors.redis_memory(server.redis_url)
        cell = LoadCell("predictions", variant.name, 16, group.soak_s, 0.0, section="soak")
        self._cell(server, group, cell, 0)
        time.sleep(2.0)  # the reply stream is trimmed as replies are read; give the last trim a moment
        after = collectors.redis_memory(server.redis_url)
        self.writer.write(
            {
                "kind": "redis_memory",
                "server": server.name,
                "duration_s": group.soak_s,
                "before": before,
                "after": after,
                "delta_used_memory": after["used_memory"] - before["used_memory"],
            }
        )

    def _held_streams(self, server: SluiceServer, group: Group) -> None:
        self.writer.write(extras.held_streams(server, group, self.payloads[group.variants[0].name]))

    def _profiles(self, server: Server, group: Group) -> None:
        """py-spy on the client, the gateway and the model's worker while extra cells run."""
        spy = tools.py_spy()
        if spy is None:
            self.writer.write({"kind": "error", "step": "profile", "error": "py-spy is not installed"})
            return
        profiles = self.out_dir / "profiles"
        for recording in extras.profiled_cells(spy, server, group, profiles, self.plan.profile_s):
            self._cell(server, group, recording.cell, 0)
            for record in recording.finish():
                self.writer.write(record)
