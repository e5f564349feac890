"""KServe v2 as a user meets it: ``sluice start`` with an archive whose model-config.yaml declares its
tensors; the manager reads the declaration, the gateway serves metadata and validates against it, a
worker answers."""

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from sluice.v1 import kserve_pb2 as pb
from sluice.v1.kserve_pb2_grpc import GRPCInferenceServiceStub

from tests.e2e.test_cli import Site
from tests.support.kserve_models import add_one_model
from tests.support.models import write_mar
from tests.support.redis_server import free_port


@pytest.fixture
def kserve_site(tmp_path: Path) -> Iterator[Site]:
    site = Site(tmp_path, free_port(), free_port())
    (tmp_path / "config.properties").write_text(
        f"grpc_inference_port={site.grpc_port}\n"
        f"grpc_management_port={free_port()}\n"
        f"inference_address=http://127.0.0.1:{free_port()}\n"
        f"management_address=http://127.0.0.1:{free_port()}\n"
        f"metrics_address=http://127.0.0.1:{free_port()}\n"
        f"sluice_redis_port={site.redis_port}\n"
    )
    write_mar(add_one_model(), tmp_path / "store")
    started = site.run("start", "--model-store", "store", "--models", "add_one=add_one.mar")
    assert started.returncode == 0, started.stderr + started.stdout
    try:
        yield site
    finally:
        site.run("stop", timeout_s=120)


def test_kserve_v2_through_the_whole_stack(kserve_site: Site) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{kserve_site.grpc_port}") as channel:
        stub = GRPCInferenceServiceStub(channel)
        auth = kserve_site.inference_metadata()  # token authorization is on
        assert stub.ServerReady(pb.ServerReadyRequest(), metadata=auth, timeout=10).ready
        metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="add_one"), metadata=auth, timeout=10)
        assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("INPUT0", "FP32", [-1, 4])]
        x = np.arange(8, dtype="<f4").reshape(2, 4)
        request = pb.ModelInferRequest(
            model_name="add_one",
            inputs=[pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[2, 4])],
            raw_input_contents=[x.tobytes()],
            outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="OUTPUT0")],
        )
        response = stub.ModelInfer(request, metadata=auth, timeout=30)
        np.testing.assert_array_equal(
            np.frombuffer(response.raw_output_contents[0], "<f4").reshape(2, 4), x + 1
        )
        request.inputs[0].datatype = "INT32"
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request, metadata=auth, timeout=30)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
