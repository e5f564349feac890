"""TorchServe's sequence continuous batching (``sequenceBatching`` with ``continuousBatching``) as a
user meets it: ``sluice start``, a handler that keeps a running count per sequence and answers each
request with several tokens, and StreamPredictions2 clients. Every request of a sequence runs after
the one before it ends, on the worker that holds the sequence; requests of different sequences share
iterations."""

import json
import time
from collections.abc import Iterator

import grpc
import pytest
from sluice.redis import keys
from sluice.v1 import torchserve_inference_pb2 as pb
from sluice.v1 import torchserve_inference_pb2_grpc as pb_grpc
from sluice.v1 import torchserve_management_pb2 as mpb
from sluice.v1 import torchserve_management_pb2_grpc as mpb_grpc

from tests.support.cli_stack import Stack
from tests.support.models import ModelSpec, write_mar

# Each request's data is how many tokens it wants; each token is the sequence's running count.
HANDLER = """
import time

totals = {}
left = {}


def handle(data, context):
    if data is None:
        return None
    ids = context.request_ids
    for gone in set(left) - set(ids.values()):
        del left[gone]
    tokens, criteria = [], []
    for idx, row in enumerate(data):
        rid, sid = ids[idx], context.get_sequence_id(idx)
        if row:
            left[rid] = int(bytes(row["data"]))
        totals[sid] = totals.get(sid, 0) + 1
        left[rid] -= 1
        tokens.append(str(totals[sid]))
        criteria.append(lambda _token, rid=rid: left[rid] == 0)
    context.stopping_criteria = criteria
    time.sleep(0.005)
    return tokens
"""
CONFIG = (
    "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 4\nmaxBatchDelay: 5\ncontinuousBatching: true\n"
    "sequenceBatching: true\nsequenceMaxIdleMSec: 60000\nmaxNumSequence: 8\nmaxSequenceJobQueueSize: 8\n"
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    started = Stack.create(tmp_path_factory.mktemp("sequence-cb"))
    spec = ModelSpec(
        "counter",
        "handler.py",
        {"handler.py": HANDLER, "model-config.yaml": CONFIG},
        config_file="model-config.yaml",
    )
    write_mar(spec, started.store)
    started.start(["counter.mar"])
    try:
        started.wait_for_workers("counter", 1)
        yield started
    finally:
        started.stop()


def step(sid: str, tokens: int) -> pb.PredictionsRequest:
    return pb.PredictionsRequest(model_name="counter", sequence_id=sid, input={"data": str(tokens).encode()})


def test_each_sequences_requests_stream_in_order_and_sequences_share_iterations(stack: Stack) -> None:
    before = _batch_sizes(stack)
    requests = [step("a", 3), step("b", 2), step("a", 2), step("b", 4), step("a", 1)]
    with grpc.insecure_channel(stack.grpc_target) as channel:
        stub = pb_grpc.InferenceAPIsServiceStub(channel)
        responses = list(stub.StreamPredictions2(iter(requests), timeout=60))
    by_sequence: dict[str, list[int]] = {}
    for response in responses:
        assert not response.HasField("status"), response.status
        by_sequence.setdefault(response.sequence_id, []).append(int(response.prediction))
    # The running count of each sequence, token by token, request after request: nothing skipped,
    # repeated or out of order.
    assert by_sequence == {"a": [1, 2, 3, 4, 5, 6], "b": [1, 2, 3, 4, 5, 6]}
    time.sleep(1.5)  # batch sizes are written at most once a second
    after = _batch_sizes(stack)
    assert sum(count - before.get(size, 0) for size, count in after.items() if size > 1) > 0, after


def _batch_sizes(stack: Stack) -> dict[int, int]:
    raw = stack.redis().hgetall(keys.batch_sizes("counter", "1.0"))
    return {int(size): int(count) for size, count in raw.items()}


def test_describe_says_stateful_and_continuous(stack: Stack) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{stack.management_port}") as channel:
        described = mpb_grpc.ManagementAPIsServiceStub(channel).DescribeModel(
            mpb.DescribeModelRequest(model_name="counter"), timeout=30
        )
    [entry] = json.loads(described.msg)
    assert entry["continuousBatching"] is True
    assert entry["stateful"] is True
