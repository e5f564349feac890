"""The in-process limit: the archive's handler, loaded by TorchServe's own ``ts`` loader exactly as a
worker loads it, called in a loop with a batch of B requests (``ts.service.Service.predict``, which
includes TorchServe's request decoding and response framing). No network, no queue: the compute
ceiling of this machine for that model.

Runs as its own process (``python -m bench.servers.inprocess ...``, started by :func:`measure`),
prints one JSON line per batch size.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench.stats import latency_summary_ms


def load_service(archive: Path, workdir: Path, batch_size: int, threads: int | None) -> Any:
    import logging

    import torch
    import ts
    from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
    from ts.model_loader import TsModelLoader

    if threads:
        torch.set_num_threads(threads)
    model_dir = workdir / archive.stem
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(model_dir)
    manifest = json.loads((model_dir / "MAR-INF" / "MANIFEST.json").read_text())
    # TorchServe's worker imports the handler from the model folder.
    sys.path.insert(0, str(model_dir))
    metrics = MetricsCacheYamlImpl(
        config_file_path=str(Path(ts.__file__).parent / "configs" / "metrics.yaml")
    )
    metrics.initialize_cache()
    metrics.model_name = archive.stem
    # A metric line per call would measure the logger; handler warnings about optional backends are noise.
    logging.getLogger("ts").setLevel(logging.ERROR)
    return TsModelLoader().load(
        archive.stem,
        str(model_dir),
        manifest["model"]["handler"],
        None,
        batch_size,
        None,
        metrics_cache=metrics,
    )


def request_batch(data: bytes, batch_size: int) -> list[dict[str, Any]]:
    """A batch in the decoded form TorchServe's worker hands ``Service.predict``."""
    return [
        {
            "requestId": f"req-{index}".encode(),
            "parameters": [{"name": "data", "value": bytearray(data), "contentType": ""}],
            "headers": [],
        }
        for index in range(batch_size)
    ]


def run(
    service: Any, batch: list[dict[str, Any]], duration_s: float, warmup_s: float, max_calls: int
) -> dict[str, Any]:
    service.set_cl_socket(None)
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:
        service.predict(batch)
    latencies: list[int] = []
    started = time.perf_counter()
    end = started + duration_s
    while len(latencies) < max_calls:
        t0 = time.perf_counter_ns()
        frame = service.predict(batch)
        latencies.append(time.perf_counter_ns() - t0)
        if time.perf_counter() >= end:
            break
    elapsed = time.perf_counter() - started
    if not frame:
        raise RuntimeError("the handler returned no frame")
    return {
        "calls": len(latencies),
        "batch": len(batch),
        "duration_s": elapsed,
        "inferences_per_s": len(latencies) * len(batch) / elapsed,
        "latency_ms": latency_summary_ms(latencies),
    }


def measure(
    archive: Path, data_file: Path, batches: tuple[int, ...], duration_s: float, warmup_s: float
) -> list[dict[str, Any]]:
    """The archive's handler called in a loop in a process of its own, once per batch size (torch
    with a thread per core); one summary each."""
    argv = [
        sys.executable,
        "-m",
        "bench.servers.inprocess",
        "--archive",
        str(archive),
        "--data",
        str(data_file),
        "--duration-s",
        str(duration_s),
        "--warmup-s",
        str(warmup_s),
        "--threads",
        str(os.cpu_count() or 1),
    ]
    for batch in batches:
        argv += ["--batch", str(batch)]
    timeout_s = 300 + 4 * (duration_s + warmup_s) * len(batches)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return [json.loads(line) for line in done.stdout.splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.servers.inprocess")
    parser.add_argument("--archive", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True, help="file with one request's raw input")
    parser.add_argument("--batch", type=int, action="append", required=True)
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--max-calls", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    data = args.data.read_bytes()
    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as temp:
        service = load_service(args.archive, Path(temp), max(args.batch), args.threads or None)
        for batch_size in args.batch:
            result = run(
                service, request_batch(data, batch_size), args.duration_s, args.warmup_s, args.max_calls
            )
            import torch

            result["threads"] = torch.get_num_threads()
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
