"""Stateful models: ``make bench-sequences`` (``python -m bench.sequences``).

One archive per setting, all with the stateful handler ``bench/handler/sequence_handler.py`` (a
two-layer GRU, input 256, hidden 1024, stepped once per request; its hidden state kept per sequence)
and TorchServe's sequence batching settings (``sequenceBatching``, ``batchSize`` 8,
``maxBatchDelay`` 5 ms, ``maxNumSequence`` 32): with 1 and 2 workers, and, for Sluice only, the same
with Sluice's sequence-state saving on (8 KiB of state written to Redis after every request).

Load: 16 concurrent sequences over REST (the ``ts_request_sequence_id`` header; TorchServe's
StreamPredictions2 drops answers when sequences share a call), each a closed loop of 40 steps ending
with ``ts_request_sequence_end``, then a new sequence. Every answer's step number is checked (a lost
or repeated step counts as wrong). Sluice and TorchServe 0.12 run at once, idle while the other is
measured, in rounds alternating their order. Prints a Markdown table and writes
``bench/results/sequences-<timestamp>.json``. Not a test: nothing is asserted.
"""

import argparse
import asyncio
import itertools
import json
import logging
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import tools
from bench.loadgen import HttpStatusError, closed_loop, run_async
from bench.servers.common import Server
from bench.servers.sluice import SluiceServer
from bench.servers.torchserve import TorchServeServer
from bench.stats import latency_summary_ms, spread

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "sequences"
RESULTS = ROOT / "results"
HANDLER_FILE = ROOT / "handler" / "sequence_handler.py"
INPUT_SIZE, HIDDEN_SIZE, LAYERS = 256, 1024, 2
SEQUENCE_HEADER, END_HEADER = "ts_request_sequence_id", "ts_request_sequence_end"


@dataclass(frozen=True)
class Sizes:
    sequences: int = 16
    steps: int = 40
    window_s: float = 15.0
    warmup_s: float = 3.0
    rounds: int = 2


QUICK = Sizes(window_s=4.0, warmup_s=1.0, rounds=1)


@dataclass(frozen=True)
class Setting:
    workers: int
    save_state: bool = False

    @property
    def name(self) -> str:
        return f"seq_w{self.workers}" + ("_saved" if self.save_state else "")

    def model_config(self) -> dict[str, Any]:
        return {
            "minWorkers": self.workers,
            "maxWorkers": self.workers,
            "batchSize": 8,
            "maxBatchDelay": 5,
            "responseTimeout": 120,
            "sequenceBatching": True,
            "sequenceMaxIdleMSec": 10000,
            # TorchServe frees an ended sequence's slot only after sequenceMaxIdleMSec: with 16 clients
            # opening a sequence every 40 steps it holds ~10 s of ended ones (with 32 it refused most
            # requests, HTTP 503). Room for them keeps both servers answering every request.
            "maxNumSequence": 512,
            "maxSequenceJobQueueSize": 2,
            "handler": {
                "input_size": INPUT_SIZE,
                "hidden_size": HIDDEN_SIZE,
                "layers": LAYERS,
                "save_state": self.save_state,
            },
        }


SLUICE_SETTINGS = [Setting(1), Setting(2), Setting(1, save_state=True), Setting(2, save_state=True)]
TORCHSERVE_SETTINGS = [Setting(1), Setting(2)]


def build_weights(path: Path) -> Path:
    """A TorchScript two-layer GRU step: (input [B, I], hidden [L, B, H]) -> hidden [L, B, H]."""
    if path.exists():
        return path
    import warnings

    import torch
    from torch import nn

    class GruStep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.GRUCell(INPUT_SIZE, HIDDEN_SIZE)
            self.second = nn.GRUCell(HIDDEN_SIZE, HIDDEN_SIZE)

        def forward(self, x: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
            first = self.first(x, hidden[0])
            return torch.stack([first, self.second(first, hidden[1])])

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream; TorchServe 0.12 loads it
        module = torch.jit.script(GruStep().eval())
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(module, str(path))
    return path


def write_archives(settings: list[Setting], store: Path) -> None:
    from model_archiver.model_archiver_config import ModelArchiverConfig
    from model_archiver.model_packaging import generate_model_archive

    weights = build_weights(WORK / "weights" / "gru.pt")
    store.mkdir(parents=True, exist_ok=True)
    logging.getLogger().setLevel(logging.WARNING)  # the archiver logs every file at INFO
    for setting in settings:
        config = WORK / "configs" / setting.name / "model-config.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(yaml.safe_dump(setting.model_config(), sort_keys=False))
        generate_model_archive(
            ModelArchiverConfig(
                model_name=setting.name,
                handler=str(HANDLER_FILE),
                version="1.0",
                serialized_file=str(weights),
                config_file=str(config),
                export_path=str(store),
                force=True,
            )
        )


class WrongStep(Exception):
    """An answer whose step is not the one the client sent (a lost or repeated step)."""


@dataclass
class SequenceClient:
    prefix: str
    index: int
    steps: int
    body: bytes
    serial: int = 0
    step: int = 0

    @property
    def sequence_id(self) -> str:
        return f"{self.prefix}-{self.index}-{self.serial}"

    async def send(self, session: Any, url: str) -> bytes:
        self.step += 1
        headers = {SEQUENCE_HEADER: self.sequence_id, "content-type": "application/octet-stream"}
        last = self.step == self.steps
        if last:
            headers[END_HEADER] = "true"
        try:
            async with session.post(url, data=self.body, headers=headers) as response:
                answer: bytes = await response.read()
                if response.status != 200:
                    raise HttpStatusError(response.status)
            if json.loads(answer)["step"] != self.step:
                raise WrongStep(answer.decode())
        except BaseException:
            self._next_sequence()  # its state on the server is unknown: start another
            raise
        if last:
            self._next_sequence()
        return answer

    def _next_sequence(self) -> None:
        self.serial += 1
        self.step = 0


async def sequence_load(url: str, sizes: Sizes, prefix: str) -> dict[str, Any]:
    import aiohttp
    import numpy as np

    body = np.random.default_rng(0).standard_normal(INPUT_SIZE).astype("<f4").tobytes()
    indexes = itertools.count()
    clients: dict[asyncio.Task[Any], SequenceClient] = {}
    connector = aiohttp.TCPConnector(limit=sizes.sequences)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def call() -> bytes:
            task = asyncio.current_task()
            assert task is not None
            client = clients.get(task)
            if client is None:
                client = clients[task] = SequenceClient(prefix, next(indexes), sizes.steps, body)
            return await client.send(session, url)

        result = await closed_loop(
            call,
            concurrency=sizes.sequences,
            duration_s=sizes.window_s,
            warmup_s=sizes.warmup_s,
            call_timeout_s=60,
        )
    return {
        "throughput_rps": result.throughput_rps,
        "latency_ms": latency_summary_ms(result.latencies_ns),
        "errors": dict(result.errors),
    }


@contextmanager
def running(server: Server, models: list[str]) -> Iterator[Server]:
    server.start(models)
    try:
        yield server
    finally:
        server.stop()


def measure(sizes: Sizes, *, with_torchserve: bool) -> list[dict[str, Any]]:
    store = WORK / "store"
    write_archives(SLUICE_SETTINGS, store)
    sluice = SluiceServer(home=WORK / "sluice", store=store)
    servers: list[tuple[Server, list[Setting]]] = [(sluice, SLUICE_SETTINGS)]
    if with_torchserve:
        venv = tools.ensure_torchserve_venv()
        tools.ensure_java()
        servers.append(
            (TorchServeServer(venv=venv, workdir=WORK / "torchserve", store=store), TORCHSERVE_SETTINGS)
        )
    records: list[dict[str, Any]] = []
    with running(servers[0][0], [s.name for s in servers[0][1]]):
        if len(servers) == 1:
            _rounds(servers, sizes, records)
        else:
            with running(servers[1][0], [s.name for s in servers[1][1]]):
                _rounds(servers, sizes, records)
    return records


def _rounds(servers: list[tuple[Server, list[Setting]]], sizes: Sizes, records: list[dict[str, Any]]) -> None:
    for round_ in range(sizes.rounds):
        order = servers if round_ % 2 == 0 else servers[::-1]
        for server, settings in order:
            for setting in settings:
                url = f"http://127.0.0.1:{server.ports.rest}/predictions/{setting.name}"
                print(f"round {round_ + 1}: {server.name} {setting.name}", flush=True)
                measured = run_async(sequence_load(url, sizes, f"{server.name}-{round_}-{setting.name}"))
                records.append({"server": server.name, "round": round_, **asdict(setting), **measured})


def table(records: list[dict[str, Any]]) -> str:
    lines = [
        "| server | workers | state saved | req/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["server"], r["workers"], r["save_state"]) for r in records})
    for server, workers, saved in keys:
        rows = [
            r for r in records if (r["server"], r["workers"], r["save_state"]) == (server, workers, saved)
        ]
        errors: dict[str, int] = {}
        for row in rows:
            for label, count in row["errors"].items():
                errors[label] = errors.get(label, 0) + count
        lines.append(
            f"| {server} | {workers} | {'yes' if saved else 'no'} "
            f"| {spread(r['throughput_rps'] for r in rows).format()} "
            f"| {spread(r['latency_ms'].get('p50') for r in rows).format()} "
            f"| {spread(r['latency_ms'].get('p99') for r in rows).format()} "
            f"| {', '.join(f'{k} {v}' for k, v in errors.items()) or '0'} |"
        )
    return "\n".join(lines)


def saving_cost(records: list[dict[str, Any]]) -> str:
    """Sluice's p50 with state saving minus without, per worker count."""
    out = []
    for workers in sorted({r["workers"] for r in records if r["server"] == "sluice"}):

        def p50(saved: bool, workers: int = workers) -> float:
            return statistics.median(
                float(r["latency_ms"]["p50"])
                for r in records
                if r["server"] == "sluice" and r["workers"] == workers and r["save_state"] is saved
            )

        out.append(f"{workers} worker(s): {p50(True) - p50(False):+.2f} ms p50 per request")
    return "state saving: " + "; ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sequences", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short windows, one round")
    parser.add_argument("--no-torchserve", action="store_true", help="measure Sluice alone")
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    records = measure(sizes, with_torchserve=not args.no_torchserve)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"sequences-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"sizes": asdict(sizes), "records": records}, indent=2))
    print(table(records))
    print(saving_cost(records))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
