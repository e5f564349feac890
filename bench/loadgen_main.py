"""``python -m bench.loadgen_main``: the Python gRPC load generator as its own process (so that it can
be pinned with taskset); prints one JSON summary line."""

import argparse
import json
import sys
from pathlib import Path

from bench import loadgen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen_main")
    parser.add_argument("--target", required=True)
    parser.add_argument("--method", required=True)
    parser.add_argument("--request", type=Path, required=True, help="file with the serialized request")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--duration-s", type=float, required=True)
    parser.add_argument("--warmup-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    result = loadgen.run_async(
        loadgen.grpc_unary_load(
            args.target,
            args.method,
            args.request.read_bytes(),
            concurrency=args.concurrency,
            duration_s=args.duration_s,
            warmup_s=args.warmup_s,
        )
    )
    print(json.dumps(loadgen.summarize(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
