"""``python -m bench.servers.floor_main``: the floor of any Python gRPC gateway. A grpc.aio server
built as the gateway builds its own (grpc core's completion-queue poller, uvloop, the gateway's
``create_server`` with its default settings) that answers TorchServe's ``Ping`` and ``Predictions``
at once with fixed bytes: no Redis, no worker, no model. What a call to it costs is what Sluice's
gateway pays for gRPC alone."""

import argparse
import sys
from pathlib import Path

from sluice.transport.grpc_poller import use_completion_queue_poller


async def serve(port: int, answer: bytes) -> None:
    import grpc
    from sluice.v1.torchserve_inference_pb2 import TorchServeHealthResponse
    from sluice_gateway.grpc_api.server import create_server
    from sluice_gateway.settings import GatewaySettings

    from bench.payloads import PING_METHOD, PREDICTIONS_METHOD, TS_SERVICE

    healthy = TorchServeHealthResponse(health='{"status": "Healthy"}').SerializeToString()

    async def predictions(_request: bytes, _context: object) -> bytes:
        return answer

    async def ping(_request: bytes, _context: object) -> bytes:
        return healthy

    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        PREDICTIONS_METHOD.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(predictions),
        PING_METHOD.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(ping),
    }
    server = create_server(GatewaySettings())
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(TS_SERVICE[1:], handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.servers.floor_main")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answer", type=Path, required=True, help="file with the serialized response")
    args = parser.parse_args(argv)
    use_completion_queue_poller()
    import uvloop

    uvloop.run(serve(args.port, args.answer.read_bytes()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
