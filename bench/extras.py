"""Measurements beside the load cells: gateway RSS while holding many streams, and py-spy profiles
of the client, the gateway and a worker while a cell runs (profiles cost CPU, so they are not
matrix cells)."""

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import collectors, loadgen, profiling
from bench.matrix import Group, LoadCell
from bench.payloads import STREAM_PREDICTIONS_METHOD, Payloads, predictions_request
from bench.servers.common import Server
from bench.servers.sluice import SluiceServer

RECORDER_TIMEOUT_S = 60


def held_streams(server: SluiceServer, group: Group, payloads: Payloads) -> dict[str, Any]:
    """The gateway's RSS idle and while ``group.held_streams`` StreamPredictions calls are open."""
    variant = group.variants[0]
    gateway = server.processes().get("gateway", [])

    async def measure() -> dict[str, float]:
        return collectors.rss_mib({"gateway": gateway})

    idle = collectors.rss_mib({"gateway": gateway})
    # Each held call asks for a long stream, so that all of them are still open when measured
    # (a streaming job runs alone on its worker: the rest wait in the queue).
    request = predictions_request(variant.name, payloads.data, {"messages": b"400", "gap_ms": b"10"})
    still_open, rss, ended = loadgen.run_async(
        loadgen.hold_streams(
            server.ports.grpc_target,
            STREAM_PREDICTIONS_METHOD,
            request,
            count=group.held_streams,
            channels=4,
            hold_s=3.0,
            measure=measure,
        )
    )
    return {
        "kind": "held_streams",
        "server": server.name,
        "streams": group.held_streams,
        "still_open": still_open,
        "gateway_rss_idle_mib": idle.get("gateway"),
        "gateway_rss_mib": rss.get("gateway"),
        "ended_early": dict(ended),
    }


@dataclass
class Recording:
    """py-spy recorders already running on a cell's processes."""

    server: str
    cell: LoadCell
    recorders: list["subprocess.Popen[bytes]"]
    outputs: dict[str, Path]

    def finish(self) -> list[dict[str, Any]]:
        """Wait for the recorders (killed after a bound); one ``profile`` record per process."""
        for recorder in self.recorders:
            try:
                recorder.wait(timeout=RECORDER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                recorder.kill()
        return [
            {
                "kind": "profile",
                "server": self.server,
                "variant": self.cell.model,
                "concurrency": self.cell.concurrency,
                "role": role,
                **profiling.summarize(path),
            }
            for role, path in self.outputs.items()
        ]


def profiled_cells(
    spy: str, server: Server, group: Group, out_dir: Path, seconds: float
) -> Iterator[Recording]:
    """Batching off at C=1 and C=64, then the last one-worker batched archive at C=64. Each
    recording's recorders start when it is yielded: run its cell, then ``finish`` it."""
    base = group.variants[0]
    batched = [v for v in group.variants if v.batch_size > 1 and v.workers == 1]
    for variant, concurrency in [(base, 1), (base, 64), *((v, 64) for v in batched[-1:])]:
        roles = server.processes()
        targets = {
            "client": os.getpid(),
            **{
                role: procs[0].pid
                for role, procs in roles.items()
                if role == "gateway" or role.startswith(f"worker:{variant.name}:")
            },
        }
        outputs = {role: out_dir / profiling.file_name(variant.name, concurrency, role) for role in targets}
        out_dir.mkdir(parents=True, exist_ok=True)
        recorders = [
            profiling.start_recording(spy, pid, seconds, outputs[role]) for role, pid in targets.items()
        ]
        cell = LoadCell("predictions", variant.name, concurrency, seconds, 0.0, section="profile")
        yield Recording(server.name, cell, recorders, outputs)
