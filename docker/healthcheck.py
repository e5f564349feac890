"""Container health check: exit 0 only if the gRPC server at ADDRESS answers grpc.health.v1 Check
with SERVING (a gateway or manager that is draining reports NOT_SERVING and turns unhealthy).

    python healthcheck.py [ADDRESS] [SERVICE]     (defaults: 127.0.0.1:7070, "" = the whole server)
"""

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TIMEOUT_S = 3.0


def main(address: str = "127.0.0.1:7070", service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S)
        except grpc.RpcError as err:
            print(f"{address}: {err.code().name} {err.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
