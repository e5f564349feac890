"""How long a Sluice that `sluice start` runs takes to serve again after kill -9 of Redis, the manager
or the gateway: inference (a fresh channel's Predictions call) for Redis and the gateway, the
management API (ListModels) for the manager.

Run it from the folder `sluice start` ran in (it reads config.properties and var/sluice.pid), with a
model loaded: ``python scripts/measure_recovery.py --model demo --rounds 5``.
"""

import argparse
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from sluice.settings.config_properties import read_properties
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1 import torchserve_management_pb2 as mpb
from sluice.v1 import torchserve_management_pb2_grpc as mpb_grpc

BOUND_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", default="[5.1, 3.5, 1.4, 0.2]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--home", type=Path, default=Path("var"))
    args = parser.parse_args()
    properties = read_properties(Path("config.properties"))
    inference = f"127.0.0.1:{properties.get('grpc_inference_port', '7070')}"
    management = f"127.0.0.1:{properties.get('grpc_management_port', '7071')}"
    probes: dict[str, Callable[[], bool]] = {
        "redis": lambda: predicts(inference, args.model, args.data.encode()),
        "manager": lambda: lists_models(management),
        "gateway": lambda: predicts(inference, args.model, args.data.encode()),
    }
    times: dict[str, list[float]] = {name: [] for name in probes}
    for _ in range(args.rounds):
        for name, probe in probes.items():
            times[name].append(recovery_s(args.home, name, probe))
            time.sleep(12)  # each crash then ends a settled run, which is restarted at once
    for name, values in times.items():
        print(f"{name:8} median {statistics.median(values):.2f} s  max {max(values):.2f} s  {values}")


def recovery_s(home: Path, name: str, serving: Callable[[], bool]) -> float:
    processes = json.loads((home / "sluice.pid").read_text())["processes"]
    pid = next(int(entry["pid"]) for entry in processes if entry["name"] == name)
    assert serving(), f"not serving before {name} is killed"
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.02)
    while not serving():
        if time.monotonic() - killed > BOUND_S:
            raise SystemExit(f"{name}: not serving again within {BOUND_S} s")
        time.sleep(0.02)
    return round(time.monotonic() - killed, 2)


def predicts(target: str, model: str, data: bytes) -> bool:
    with grpc.insecure_channel(target) as channel:
        try:
            pb_grpc.InferenceAPIsServiceStub(channel).Predictions(
                pb.PredictionsRequest(model_name=model, input={"data": data}), timeout=1
            )
        except grpc.RpcError:
            return False
    return True


def lists_models(target: str) -> bool:
    with grpc.insecure_channel(target) as channel:
        try:
            mpb_grpc.ManagementAPIsServiceStub(channel).ListModels(mpb.ListModelsRequest(), timeout=1)
        except grpc.RpcError:
            return False
    return True


if __name__ == "__main__":
    main()
