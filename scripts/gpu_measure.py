"""What `make gpu-check` measures on a running stack (scripts/gpu_check.sh starts it): registers the
demo archive under another name with one worker, checks where that worker runs (DescribeModel's
device and GPU use, the worker container's ``worker ready`` log line), and times predictions.

Prints one line per measurement and ``PASS: ...`` (exit 0) when the worker serves on the expected
device, else ``FAIL: ...`` (exit 1). Unregisters the model afterwards.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

MODEL = "gpucheck"
ROW = b"[5.1, 3.5, 1.4, 0.2]"
CALLS = 200
THROUGHPUT_S = 5.0
CLIENTS = 8
Metadata = tuple[tuple[str, str], ...]


def management(args: argparse.Namespace, method: str, path: str) -> object:
    request = urllib.request.Request(
        f"http://127.0.0.1:{args.management_port}{path}",
        method=method,
        headers={"Authorization": f"Bearer {args.management_key}"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read() or b"null")


def ready_device(cluster_label: str) -> str:
    """The device in the ``worker ready`` log line of the model's worker container."""
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=io.sluice.model={MODEL}", "--filter", cluster_label],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    for container in ids:
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True, timeout=30)
        for line in (logs.stdout + logs.stderr).splitlines():
            if '"worker ready"' in line:
                return str(json.loads(line).get("device", "?"))
    return "?"


def latencies_ms(stub: pb_grpc.InferenceAPIsServiceStub, metadata: Metadata) -> list[float]:
    request = pb.PredictionsRequest(model_name=MODEL, input={"data": ROW})
    out = []
    for _ in range(CALLS):
        started = time.perf_counter()
        stub.Predictions(request, metadata=metadata, timeout=60)
        out.append((time.perf_counter() - started) * 1000)
    return out


def throughput(stub: pb_grpc.InferenceAPIsServiceStub, metadata: Metadata) -> float:
    request = pb.PredictionsRequest(model_name=MODEL, input={"data": ROW})
    deadline = time.monotonic() + THROUGHPUT_S

    def client() -> int:
        done = 0
        while time.monotonic() < deadline:
            stub.Predictions(request, metadata=metadata, timeout=60)
            done += 1
        return done

    with ThreadPoolExecutor(CLIENTS) as pool:
        return sum(pool.map(lambda _: client(), range(CLIENTS))) / THROUGHPUT_S


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--management-port", type=int, required=True)
    parser.add_argument("--inference-key", default="")
    parser.add_argument("--management-key", default="")
    parser.add_argument("--cluster", required=True, help="the stack's cluster id (io.sluice.cluster)")
    parser.add_argument("--expect-device", default="cuda:0")
    args = parser.parse_args()
    metadata = (("authorization", f"Bearer {args.inference_key}"),) if args.inference_key else ()

    started = time.perf_counter()
    management(args, "POST", f"/models?url=demo.mar&model_name={MODEL}&initial_workers=1&synchronous=true")
    print(f"register to READY: {time.perf_counter() - started:.2f} s")
    try:
        described = management(args, "GET", f"/models/{MODEL}")
        assert isinstance(described, list)
        worker = described[0]["workers"][0]
        device = ready_device(f"label=io.sluice.cluster={args.cluster}")
        print(f"device: {device} (DescribeModel: deviceType {described[0].get('deviceType')}, "
              f"gpu {worker.get('gpu')}, {worker.get('gpuUsage')})")  # fmt: skip
        with grpc.insecure_channel(f"127.0.0.1:{args.grpc_port}") as channel:
            stub = pb_grpc.InferenceAPIsServiceStub(channel)
            measured = sorted(latencies_ms(stub, metadata))
            print(f"latency over {CALLS} sequential calls: p50 {statistics.median(measured):.2f} ms, "
                  f"p99 {measured[int(len(measured) * 0.99) - 1]:.2f} ms")  # fmt: skip
            print(f"throughput, {CLIENTS} clients: {throughput(stub, metadata):.0f} calls/s")
    finally:
        management(args, "DELETE", f"/models/{MODEL}")
    if device != args.expect_device:
        print(f"FAIL: the worker runs on {device}, not {args.expect_device}")
        return 1
    print(f"PASS: the demo model served on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
