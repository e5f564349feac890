"""Sluice and TorchServe head to head: both up at once after their own groups, their mlp cells run
in alternating rounds (A B, B A, ...), so that the machine's drift over a run falls on both alike.
The gRPC floor (:mod:`bench.servers.floor`, a grpc.aio server that answers at once) runs Sluice's
cells in the same rounds: what no Python gRPC gateway can beat, measured beside both.

The matrix measures each server's cells tens of minutes apart, and the throughput ratio moved by
0.2-0.3 between runs an hour apart; the latency and throughput targets compare these rounds' medians
when the run has them. Which cells run is read off the run's matrix: batching off at C=1, and each
server's best cell for each client (a fixed cell for a server the preset runs only here).
"""

from bench.cells import Cells, Record
from bench.matrix import HEAD_TO_HEAD_BASE, HeadToHead, LoadCell

SECTION = "head_to_head"
SERVERS = ("sluice", "torchserve")
FLOOR = "floor"
ROUND_SERVERS = (*SERVERS, FLOOR)
BASE_VARIANT = HEAD_TO_HEAD_BASE.name
# (client, the matrix section its best cell is picked from)
BEST_OF = (("python", "matrix"), ("h2load", "h2load"))


def picked_cells(records: list[Record], server: str, plan: HeadToHead) -> list[LoadCell]:
    """The cells ``server`` runs in each round: C=1 on the base archive, then its best matrix cell
    per client; a server that ran no matrix cells runs the plan's default best cell instead."""
    cells = Cells(records)
    ran_matrix = cells.get(server=server, api="predictions", variant=BASE_VARIANT, concurrency=1)
    picked = [LoadCell("predictions", BASE_VARIANT, 1, plan.duration_s, plan.warmup_s, section=SECTION)]
    default_variant, default_concurrency = plan.default_best
    for client, section in BEST_OF:
        variant, concurrency = default_variant.name, default_concurrency
        if ran_matrix is not None:
            _value, best = cells.best_throughput(
                section=section, server=server, api="predictions", client=client, model="mlp"
            )
            if best is None:
                continue
            variant, concurrency = best.key.variant, best.key.concurrency
        picked.append(
            LoadCell(
                "predictions",
                variant,
                concurrency,
                plan.duration_s,
                plan.warmup_s,
                client=client,
                section=SECTION,
            )
        )
    return picked


def round_order(round_: int) -> tuple[str, ...]:
    """A B C, C B A, ...: the first and the last server swap places every other round."""
    return ROUND_SERVERS if round_ % 2 == 0 else ROUND_SERVERS[::-1]
