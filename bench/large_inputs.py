"""Large inputs, Sluice beside TorchServe 0.12: ``make bench-large`` (``python -m bench.large_inputs``;
``--quick``).

The ``big1``, ``big4`` and ``big16`` models (bench/models.py) take 1, 4 and 16 MiB of float32 and answer
their mean (4 bytes), so each call's time is what carrying its input costs: the client's send, the
server's receive and copies, the hop to the worker, and the handler's decode. Both servers run every
model with one worker and batch 1 (``max_request_size`` 64 MiB on both). Each round runs one server's
cells, then the other's (A B, B A, ...); the other server idles meanwhile.

- TorchServe gRPC ``Predictions`` (raw bytes under ``data``) on both servers;
- KServe v2 gRPC ``ModelInfer`` with one raw FP32 tensor, on Sluice (TorchServe 0.12 does not serve
  v2 gRPC by default);
- KServe v2 gRPC ``ModelInfer`` with the tensor in system shared memory, on Sluice: the client made a
  /dev/shm object and registered it (``SystemSharedMemoryRegister``); each call names the region, the
  worker reads the bytes from /dev/shm. Two cells: the tensor written into the object once (a client
  whose tensors are made in shared memory), and written again before every call, inside its time (a
  client that copies each tensor in).

At C=1 (p50 and p99) and at C=4 (throughput: one worker is saturated). Prints a Markdown table
(median of rounds, with the range) and writes ``bench/results/large-<timestamp>.json``. Not a test:
nothing is asserted.
"""

import argparse
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import grpc
from sluice.v1 import kserve_pb2

from bench.loadgen import grpc_unary_load, run_async
from bench.models import Variant, build_archives
from bench.payloads import (
    MODEL_INFER_METHOD,
    PREDICTIONS_METHOD,
    model_infer_request,
    model_infer_shm_request,
    predictions_request,
    tensor_bytes,
)
from bench.platform import distinct_ports
from bench.servers.sluice import SluiceServer
from bench.servers.torchserve import TorchServeServer
from bench.stats import latency_summary_ms, spread
from bench.tools import ensure_torchserve_venv

ROOT = Path(__file__).resolve().parent
WORK = ROOT / ".work" / "large"
RESULTS = ROOT / "results"
MODELS = (Variant("big1"), Variant("big4"), Variant("big16"))
SATURATION = 4
MAX_REQUEST_BYTES = 64 * 1024 * 1024
SERVER_PROPERTIES = {"max_request_size": MAX_REQUEST_BYTES, "max_response_size": MAX_REQUEST_BYTES}
SLUICE_PROPERTIES = {**SERVER_PROPERTIES, "sluice_system_shared_memory": "true"}
SHM_PROTOCOL = "KServe v2 gRPC, shm"
SHM_WRITTEN_PROTOCOL = "KServe v2 gRPC, shm written per call"


@dataclass(frozen=True)
class Sizes:
    window_s: float = 10.0
    warmup_s: float = 2.0
    rounds: int = 2


QUICK = Sizes(window_s=3.0, warmup_s=1.0, rounds=1)


@dataclass(frozen=True)
class Cell:
    server: str
    protocol: str
    model: Variant
    method: str
    request: bytes
    # The tensor's bytes (the request holds fewer when the tensor is in shared memory).
    payload_bytes: int
    # The client copies the tensor into its shared-memory object before each call.
    writes_per_call: bool = False

    @property
    def key(self) -> str:
        return f"{self.model.kind} {self.server} {self.protocol}"


def cells_of(server: str, model: Variant, *, kserve: bool) -> list[Cell]:
    data = tensor_bytes(model.shape)
    size = len(data)
    found = [
        Cell(
            server, "TorchServe gRPC", model, PREDICTIONS_METHOD, predictions_request(model.name, data), size
        )
    ]
    if kserve:
        found += [
            Cell(
                server,
                "KServe v2 gRPC",
                model,
                MODEL_INFER_METHOD,
                model_infer_request(model.name, data, model.shape),
                size,
            ),
        ]
        shm_request = model_infer_shm_request(model.name, model.name, size, model.shape)
        found += [
            Cell(server, protocol, model, MODEL_INFER_METHOD, shm_request, size, writes_per_call=written)
            for protocol, written in ((SHM_PROTOCOL, False), (SHM_WRITTEN_PROTOCOL, True))
        ]
    return found


@contextmanager
def shared_inputs(target: str) -> Iterator[dict[str, Callable[[], None]]]:
    """Each model's tensor in a /dev/shm object of its own, registered with the server at ``target`` as
    a region named after the model; yields, by model name, what writes the tensor into its object."""
    objects: list[shared_memory.SharedMemory] = []
    writers: dict[str, Callable[[], None]] = {}
    channel = grpc.insecure_channel(target)
    register = channel.unary_unary(
        "/inference.GRPCInferenceService/SystemSharedMemoryRegister",
        request_serializer=kserve_pb2.SystemSharedMemoryRegisterRequest.SerializeToString,
        response_deserializer=kserve_pb2.SystemSharedMemoryRegisterResponse.FromString,
    )
    try:
        for model in MODELS:
            data = tensor_bytes(model.shape)
            block = shared_memory.SharedMemory(create=True, size=len(data))
            objects.append(block)
            writers[model.name] = functools.partial(_write, block, data)
            writers[model.name]()
            register(
                kserve_pb2.SystemSharedMemoryRegisterRequest(
                    name=model.name, key=f"/{block.name}", byte_size=len(data)
                ),
                timeout=10,
            )
        yield writers
    finally:
        channel.close()
        for block in objects:
            block.close()
            block.unlink()


def _write(block: shared_memory.SharedMemory, data: bytes) -> None:
    view = block.buf
    assert view is not None
    view[: len(data)] = data


async def measure(
    cell: Cell, target: str, sizes: Sizes, before_call: Callable[[], None] | None = None
) -> dict[str, Any]:
    async def load(concurrency: int) -> Any:
        return await grpc_unary_load(
            target,
            cell.method,
            cell.request,
            concurrency=concurrency,
            duration_s=sizes.window_s,
            warmup_s=sizes.warmup_s,
            before_call=before_call,
        )

    single = await load(1)
    loaded = await load(SATURATION)
    latency = latency_summary_ms(single.latencies_ns)
    return {
        "c1_p50_ms": latency["p50"],
        "c1_p99_ms": latency["p99"],
        "throughput_rps": loaded.throughput_rps,
        "throughput_mib_s": loaded.throughput_rps * cell.payload_bytes / 2**20,
        "errors": sum(single.errors.values()) + sum(loaded.errors.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one short round")
    sizes = QUICK if parser.parse_args().quick else Sizes()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    WORK.mkdir(parents=True, exist_ok=True)
    store = WORK / "store"
    build_archives(list(MODELS), store, WORK / "weights")
    sluice_ports, torchserve_ports = distinct_ports(2)
    sluice = SluiceServer(WORK / "sluice", store, sluice_ports, extra_properties=SLUICE_PROPERTIES)
    torchserve = TorchServeServer(
        ensure_torchserve_venv(), WORK / "torchserve", store, torchserve_ports,
        properties={key: str(value) for key, value in SERVER_PROPERTIES.items()},
    )  # fmt: skip
    names = [model.name for model in MODELS]
    groups: dict[str, tuple[str, list[Cell]]] = {
        "sluice": (sluice_ports.grpc_target, [c for m in MODELS for c in cells_of("Sluice", m, kserve=True)]),
        "torchserve": (
            torchserve_ports.grpc_target,
            [c for m in MODELS for c in cells_of("TorchServe", m, kserve=False)],
        ),
    }
    rows: dict[str, list[dict[str, Any]]] = {}
    stops: list[Callable[[], None]] = []
    try:
        for server in (sluice, torchserve):
            server.start(names)
            stops.append(server.stop)
        with shared_inputs(sluice_ports.grpc_target) as writers:
            for round_index in range(sizes.rounds):
                order = ["sluice", "torchserve"] if round_index % 2 == 0 else ["torchserve", "sluice"]
                for group in order:
                    target, cells = groups[group]
                    for cell in cells:
                        write = writers[cell.model.name] if cell.writes_per_call else None
                        rows.setdefault(cell.key, []).append(run_async(measure(cell, target, sizes, write)))
    finally:
        for stop in reversed(stops):
            stop()
    report(sizes, rows)


def report(sizes: Sizes, rows: dict[str, list[dict[str, Any]]]) -> None:
    print("\n| input | server | protocol | C=1 p50 ms | C=1 p99 ms | C=4 rps | C=4 MiB/s | failed calls |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(rows, key=lambda k: (int(k.split()[0][3:]), k)):
        measured = rows[key]
        kind, server, protocol = key.split(" ", 2)
        p50 = spread(row["c1_p50_ms"] for row in measured)
        p99 = spread(row["c1_p99_ms"] for row in measured)
        rps = spread(row["throughput_rps"] for row in measured)
        mib = spread(row["throughput_mib_s"] for row in measured)
        errors = sum(row["errors"] for row in measured)
        print(
            f"| {kind[3:]} MiB | {server} | {protocol} | {p50.format(2)} | {p99.format(2)} | "
            f"{rps.format(1)} | {mib.format(0)} | {errors} |"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"large-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"sizes": asdict(sizes), "rows": rows}, indent=2))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
