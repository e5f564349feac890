"""A stand-in worker for manager tests: a real process that keeps the worker's Redis contract
(docs/design.md "Worker process") without torch, so that launcher and reconcile tests run fast.

``python -m tests.integration.manager.fake_worker --model-name M --model-version V --worker-id ID
[--torch-threads N] [--gpu-id N]`` with ``SLUICE_REDIS_URL`` set. It reads its version record; the
record's ``model_yaml_config["fake"]`` tunes it: ``load_s`` (delay before READY), ``exit_code``
(exit with it instead of announcing, a failed load), ``ttl_s`` / ``interval_s`` (heartbeat),
``drain_s`` (how long a SIGTERM takes to end it: a worker finishing a long batch; more SIGTERMs are
ignored meanwhile).
Each start is appended to the list ``test:fake:<model>:<version>:starts`` (JSON). ``--standby`` waits
for its assignment on stdin, as the real worker's does.
SIGTERM: withdraw the record and heartbeat, exit 0.
"""

import argparse
import json
import os
import signal
import socket
import sys
import time
from types import FrameType

import redis
from sluice.lifecycle.worker_standby import STANDBY_FLAG, await_assignment
from sluice.redis import keys
from sluice.registry import reader as registry
from sluice.registry.records import VersionRecord, WorkerRecord, WorkerStatus


def starts_key(model: str, version: str) -> str:
    return f"test:fake:{model}:{version}:starts"


class _Stop(Exception):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


def main() -> int:
    argv = sys.argv[1:]
    if argv == [STANDBY_FLAG]:
        assigned = await_assignment()
        if assigned is None:
            return 0
        argv = assigned
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--model-version", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--torch-threads", type=int)
    parser.add_argument("--gpu-id", type=int)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    client = redis.Redis.from_url(os.environ["SLUICE_REDIS_URL"])
    model, version, worker_id = args.model_name, args.model_version, args.worker_id
    raw = client.hget(keys.version_config(model, version), registry.RECORD_FIELD)
    conf = VersionRecord.from_json(raw).model_yaml_config.get("fake", {}) if raw else {}
    client.rpush(
        starts_key(model, version),
        json.dumps({"worker_id": worker_id, "pid": os.getpid(), "torch_threads": args.torch_threads}),
    )
    print(f"fake worker {worker_id} starting for {model} {version}", flush=True)
    hb_key = keys.heartbeat(model, version, worker_id)
    record = WorkerRecord(
        worker_id=worker_id,
        pid=os.getpid(),
        host=socket.gethostname(),
        status=WorkerStatus.READY,
        started_unix_ms=int(time.time() * 1000),
    )
    ttl_ms = int(float(conf.get("ttl_s", 1.0)) * 1000)
    try:
        time.sleep(float(conf.get("load_s", 0.0)))
        if "exit_code" in conf:
            return int(conf["exit_code"])
        while True:
            client.set(hb_key, os.getpid(), px=ttl_ms)
            client.hset(keys.workers(model, version), worker_id, record.to_json())
            time.sleep(float(conf.get("interval_s", 0.2)))
    except _Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(float(conf.get("drain_s", 0.0)))
        client.hdel(keys.workers(model, version), worker_id)
        client.delete(hb_key)
        print(f"fake worker {worker_id} stopped", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
