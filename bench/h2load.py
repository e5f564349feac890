"""The native HTTP/2 load generator: ``h2load`` (Debian's nghttp2-client) posting a pre-framed gRPC
request with ``content-type: application/grpc``. It drives the throughput ceilings without the ~0.2
CPU-ms per request a Python client costs.

h2load sees HTTP statuses, not gRPC statuses (a gRPC error is an HTTP 200 with a ``grpc-status``
trailer), so the runner checks the same request with the Python client first.
"""

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_FINISHED = re.compile(r"finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s")
_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored"
)
_REQUEST_TIME = re.compile(
    r"time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)"
)
_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")


@dataclass(frozen=True)
class H2loadResult:
    duration_s: float
    throughput_rps: float
    done: int
    succeeded: int
    failed: int
    errored: int
    status_2xx: int
    latency_min_ms: float
    latency_max_ms: float
    latency_mean_ms: float
    latency_sd_ms: float


def available() -> bool:
    return shutil.which("h2load") is not None


def command(
    url: str, body_file: Path, *, clients: int, streams_per_client: int, duration_s: float, warmup_s: float
) -> list[str]:
    """The h2load command line: ``clients`` connections times ``streams_per_client`` concurrent streams."""
    if clients < 1 or streams_per_client < 1:
        raise ValueError("clients and streams_per_client must be >= 1")
    return [
        "h2load",
        "--duration",
        f"{max(1, round(duration_s * 1000))}ms",
        "--warm-up-time",
        f"{max(1, round(warmup_s * 1000))}ms",
        "--clients",
        str(clients),
        "--max-concurrent-streams",
        str(streams_per_client),
        "--threads",
        "1",
        "--header",
        "content-type: application/grpc",
        "--header",
        "te: trailers",
        "--data",
        str(body_file),
        url,
    ]


def split_concurrency(concurrency: int, max_clients: int = 1) -> tuple[int, int]:
    """(connections, streams per connection) for a total concurrency; one connection by default,
    as the Python client uses one channel."""
    clients = max(1, min(max_clients, concurrency))
    return clients, max(1, concurrency // clients)


def _ms(value: str, unit: str) -> float:
    return float(value) * _UNITS_MS[unit]


def parse(output: str) -> H2loadResult:
    """The summary of an h2load run; ValueError if the output has none."""
    finished = _FINISHED.search(output)
    requests = _REQUESTS.search(output)
    if finished is None or requests is None:
        raise ValueError("h2load printed no summary")
    timing = _REQUEST_TIME.search(output)
    status = _STATUS.search(output)
    latency = [_ms(timing.group(i), timing.group(i + 1)) for i in (1, 3, 5, 7)] if timing else [0.0] * 4
    return H2loadResult(
        duration_s=_ms(finished.group(1), finished.group(2)) / 1e3,
        throughput_rps=float(finished.group(3)),
        done=int(requests.group(3)),
        succeeded=int(requests.group(4)),
        failed=int(requests.group(5)),
        errored=int(requests.group(6)),
        status_2xx=int(status.group(1)) if status else 0,
        latency_min_ms=latency[0],
        latency_max_ms=latency[1],
        latency_mean_ms=latency[2],
        latency_sd_ms=latency[3],
    )


def run(
    url: str,
    body_file: Path,
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    timeout_s: float = 120.0,
) -> H2loadResult:
    clients, streams = split_concurrency(concurrency)
    argv = command(
        url, body_file, clients=clients, streams_per_client=streams, duration_s=duration_s, warmup_s=warmup_s
    )
    completed = subprocess.run(
        argv, capture_output=True, text=True, timeout=duration_s + warmup_s + timeout_s, check=False
    )
    return parse(completed.stdout)
