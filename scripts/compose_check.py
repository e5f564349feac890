"""End-to-end check of a running stack from the host (scripts/compose_up.sh): one TorchServe
Predictions and one StreamPredictions call through the gateway, with the project's generated stubs.

Waits (bounded) until the model answers: right after `up` the version may not be registered yet or
its workers may still be loading (NOT_FOUND / UNAVAILABLE); any other error fails at once.
Prints one PASS/FAIL line per call; exit 0 only if both passed. Token authorization is on in the
stack: ``--token`` is the inference key (compose_up.sh reads it from the manager's key file).
"""

import argparse
import sys
import time

import grpc
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc

# Answers that mean "not ready yet" while the stack starts.
NOT_READY = {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
CALL_TIMEOUT_S = 30.0


def _request(args: argparse.Namespace) -> pb.PredictionsRequest:
    return pb.PredictionsRequest(
        model_name=args.model, model_version=args.version, input={args.input_key: args.input.encode()}
    )


def _metadata(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {args.token}"),) if args.token else ()


def wait_for_prediction(stub: pb_grpc.InferenceAPIsServiceStub, args: argparse.Namespace) -> bytes:
    deadline = time.monotonic() + args.timeout_s
    while True:
        try:
            reply: pb.PredictionResponse = stub.Predictions(
                _request(args), metadata=_metadata(args), timeout=CALL_TIMEOUT_S
            )
            return reply.prediction
        except grpc.RpcError as err:
            if err.code() not in NOT_READY or time.monotonic() >= deadline:
                raise
            details = (err.details() or "").splitlines()[0:1]
            print(f"  waiting for {args.model}: {err.code().name} {' '.join(details)}", flush=True)
            time.sleep(2.0)


def stream_predictions(stub: pb_grpc.InferenceAPIsServiceStub, args: argparse.Namespace) -> list[bytes]:
    replies = stub.StreamPredictions(_request(args), metadata=_metadata(args), timeout=CALL_TIMEOUT_S)
    return [reply.prediction for reply in replies]


def _failed(call: str, err: grpc.RpcError) -> str:
    return f"FAIL: {call}: {err.code().name} {err.details()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:7070")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--version", default="", help="empty: the model's default version")
    parser.add_argument("--input-key", default="data")
    parser.add_argument("--input", default="[5.1, 3.5, 1.4, 0.2]", help="the demo model's example row")
    parser.add_argument("--expect", default='"label"', help="text every prediction must contain")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="how long to wait for the model")
    parser.add_argument("--token", default="", help="the inference key (empty: send no authorization)")
    parser.add_argument("--ca", default="", help="PEM certificate to trust: the port serves TLS (TLS=1)")
    args = parser.parse_args()

    ok = True
    if args.ca:
        with open(args.ca, "rb") as ca:
            channel = grpc.secure_channel(args.address, grpc.ssl_channel_credentials(ca.read()))
    else:
        channel = grpc.insecure_channel(args.address)
    with channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        try:
            prediction = wait_for_prediction(stub, args)
        except grpc.RpcError as err:
            print(_failed("Predictions", err))
            return 1
        if args.expect.encode() in prediction:
            print(f"PASS: Predictions -> {prediction[:200]!r}")
        else:
            print(f"FAIL: Predictions -> {prediction[:200]!r} lacks {args.expect!r}")
            ok = False
        try:
            chunks = stream_predictions(stub, args)
        except grpc.RpcError as err:
            print(_failed("StreamPredictions", err))
            return 1
        if chunks and all(args.expect.encode() in chunk for chunk in chunks):
            print(f"PASS: StreamPredictions -> {len(chunks)} response(s), last {chunks[-1][:200]!r}")
        else:
            print(
                f"FAIL: StreamPredictions -> {[chunk[:200] for chunk in chunks]!r}, expected {args.expect!r}"
            )
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
