"""Drives one load cell with the client it names: the asyncio gRPC or REST load generator in this
process, the same generator in its own process pinned with ``taskset``, or h2load."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import h2load, loadgen
from bench.matrix import LoadCell
from bench.payloads import (
    MODEL_INFER_METHOD,
    PREDICTIONS_METHOD,
    REST_CONTENT_TYPE,
    STREAM_PREDICTIONS_METHOD,
    Payloads,
    grpc_frame,
)
from bench.servers.common import Ports


def drive(ports: Ports, cell: LoadCell, payloads: Payloads, work_dir: Path) -> dict[str, Any]:
    """Runs one load cell against the server listening on ``ports``; the measured summary."""
    target = ports.grpc_target
    common: dict[str, Any] = {
        "concurrency": cell.concurrency,
        "duration_s": cell.duration_s,
        "warmup_s": cell.warmup_s,
    }
    if cell.client == "h2load":
        return _h2load(ports, cell, payloads, work_dir)
    if cell.pin_client:
        return _pinned_client(ports, cell, payloads, work_dir)
    if cell.api == "predictions":
        result = loadgen.run_async(
            loadgen.grpc_unary_load(target, PREDICTIONS_METHOD, payloads.predictions, **common)
        )
    elif cell.api == "kserve":
        result = loadgen.run_async(
            loadgen.grpc_unary_load(target, MODEL_INFER_METHOD, payloads.model_infer, **common)
        )
    elif cell.api == "rest":
        url = f"{ports.rest_url}/predictions/{payloads.model}"
        result = loadgen.run_async(loadgen.rest_load(url, payloads.rest, REST_CONTENT_TYPE, **common))
    else:
        result = loadgen.run_async(
            loadgen.grpc_stream_load(target, STREAM_PREDICTIONS_METHOD, payloads.predictions, **common)
        )
    return loadgen.summarize(result)


def _h2load(ports: Ports, cell: LoadCell, payloads: Payloads, work_dir: Path) -> dict[str, Any]:
    body = work_dir / f"{payloads.model}.grpc"
    body.write_bytes(grpc_frame(payloads.predictions))
    url = f"http://{ports.grpc_target}{PREDICTIONS_METHOD}"
    result = h2load.run(
        url, body, concurrency=cell.concurrency, duration_s=cell.duration_s, warmup_s=cell.warmup_s
    )
    return {
        "requests": result.succeeded,
        # h2load counts the measured window only; its warm-up ran at about the same rate.
        "completed": round(result.throughput_rps * (cell.warmup_s + cell.duration_s)),
        "throughput_rps": result.throughput_rps,
        "errors": {"h2load failed": result.failed, "h2load errored": result.errored}
        if result.failed or result.errored
        else {},
        "latency_ms": {
            "mean": result.latency_mean_ms,
            "min": result.latency_min_ms,
            "max": result.latency_max_ms,
            "sd": result.latency_sd_ms,
        },
        "duration_s": result.duration_s,
    }


def _pinned_client(ports: Ports, cell: LoadCell, payloads: Payloads, work_dir: Path) -> dict[str, Any]:
    """The Python client in its own process, pinned to the last CPU with taskset."""
    body = work_dir / f"{payloads.model}.predictions"
    body.write_bytes(payloads.predictions)
    cpu = max(os.sched_getaffinity(0))
    argv = [
        "taskset",
        "-c",
        str(cpu),
        sys.executable,
        "-m",
        "bench.loadgen_main",
        "--target",
        ports.grpc_target,
        "--method",
        PREDICTIONS_METHOD,
        "--request",
        str(body),
        "--concurrency",
        str(cell.concurrency),
        "--duration-s",
        str(cell.duration_s),
        "--warmup-s",
        str(cell.warmup_s),
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=cell.duration_s + cell.warmup_s + 120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    loaded: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    loaded["pinned_cpu"] = cpu
    return loaded
