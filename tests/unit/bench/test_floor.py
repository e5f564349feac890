from pathlib import Path

import grpc
import pytest
from sluice.v1 import torchserve_inference_pb2

from bench.payloads import Payloads, prediction_of
from bench.servers.common import ping_healthy, predict
from bench.servers.floor import FloorServer


def test_the_floor_answers_every_prediction_with_the_given_bytes_and_stops(tmp_path: Path) -> None:
    answer = torchserve_inference_pb2.PredictionResponse(prediction=b"[0.25, 0.5]").SerializeToString()
    server = FloorServer(tmp_path / "floor", answer)
    server.start([])
    try:
        assert ping_healthy(server.ports.grpc_target, timeout_s=2.0)
        request = Payloads.build("mlp_b1_w1", (64,)).predictions
        for _ in range(3):
            assert predict(server.ports.grpc_target, request) == answer
        assert prediction_of(predict(server.ports.grpc_target, b"")) == b"[0.25, 0.5]"
        (process,) = server.processes()["gateway"]
        assert process.is_running()
    finally:
        server.stop()
    assert server.processes() == {}
    with pytest.raises(grpc.RpcError):
        predict(server.ports.grpc_target, b"", timeout_s=0.5)
