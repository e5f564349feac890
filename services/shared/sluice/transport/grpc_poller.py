"""Which poller feeds grpc.aio in Sluice's gRPC servers (the gateway and the manager).

grpcio 1.82 hands grpc.aio its completion events from an EventEngine poller (grpc core's
``event_engine_poller_for_python`` experiment, on by default). With it off, grpc.aio polls grpc
core's completion queue as it did before, which costs a server less CPU per call: a bare grpc.aio
server answering h2load spent ~272 CPU-µs per call against ~305 with the default (C=64, four
alternating starts each), and answered a lone caller (C=1) in ~290 µs against ~340; the gateway
in the services spent 6-9% less CPU per request (bench/README.md).

grpc core reads ``GRPC_EXPERIMENTS`` once, when grpc is first imported: call this before that.
A value the user set is kept as it is (it replaces this one: add the entry to it to keep both).
"""

import os
from collections.abc import MutableMapping

EXPERIMENTS_VARIABLE = "GRPC_EXPERIMENTS"
COMPLETION_QUEUE_POLLER = "-event_engine_poller_for_python"


def use_completion_queue_poller(environ: MutableMapping[str, str] = os.environ) -> None:
    environ.setdefault(EXPERIMENTS_VARIABLE, COMPLETION_QUEUE_POLLER)
