"""Stream a tiny_gpt generation: ``python -m examples.tiny_gpt.client "Hello" [--rest] [--host 127.0.0.1]
[--token KEY]``.

gRPC (default): TorchServe's ``InferenceAPIsService.StreamPredictions`` on port 7070, one message per token.
REST (``--rest``): ``POST /predictions/<model>`` with a JSON body on port 8080, read chunk by chunk.
Works against Sluice's gateway and against TorchServe 0.12 alike. Tokens are printed as they arrive.
"""

import argparse
import json
import sys
import urllib.request
from collections.abc import Iterator

import grpc
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc


def stream_grpc(
    prompt: str,
    *,
    host: str,
    port: int,
    model: str,
    max_new_tokens: int | None,
    token: str | None,
    timeout: float,
) -> Iterator[bytes]:
    inputs = {"data": prompt.encode("utf-8")}
    if max_new_tokens is not None:
        inputs["max_new_tokens"] = str(max_new_tokens).encode()
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        request = pb.PredictionsRequest(model_name=model, input=inputs)
        for response in stub.StreamPredictions(request, metadata=metadata, timeout=timeout):
            yield response.prediction


def stream_rest(
    prompt: str,
    *,
    host: str,
    port: int,
    model: str,
    max_new_tokens: int | None,
    token: str | None,
    timeout: float,
) -> Iterator[bytes]:
    body: dict[str, object] = {"prompt": prompt}
    if max_new_tokens is not None:
        body["max_new_tokens"] = max_new_tokens
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"http://{host}:{port}/predictions/{model}",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        while chunk := response.read1(65536):  # returns as soon as a chunk of the response arrived
            yield chunk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.tiny_gpt.client", description=__doc__.split("\n")[0]
    )
    parser.add_argument("prompt")
    parser.add_argument("--rest", action="store_true", help="use the REST API (default: gRPC)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="default: 7070 (gRPC) or 8080 (REST)")
    parser.add_argument(
        "--model", default="tiny_gpt", help="tiny_gpt (continuous batching) or tiny_gpt_async"
    )
    parser.add_argument("--max-new-tokens", type=int, help="default: the model's (32)")
    parser.add_argument("--token", help="inference key, sent as 'Authorization: Bearer <key>'")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole generation")
    args = parser.parse_args(argv)
    stream = stream_rest if args.rest else stream_grpc
    port = args.port or (8080 if args.rest else 7070)
    try:
        for chunk in stream(
            args.prompt,
            host=args.host,
            port=port,
            model=args.model,
            max_new_tokens=args.max_new_tokens,
            token=args.token,
            timeout=args.timeout,
        ):
            sys.stdout.write(chunk.decode("utf-8", errors="replace"))
            sys.stdout.flush()
    except grpc.RpcError as exc:
        print(f"\nerror: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except OSError as exc:  # urllib's HTTPError and URLError are OSErrors
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
