"""Our .proto files must be wire-identical to TorchServe's own (from the 0.12.0 jar): same packages,
services, methods, streaming flags, messages, field names, numbers, types and labels."""

import zipfile
from importlib import resources
from pathlib import Path

import google.rpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from tests.compat.torchserve_protos import jar_path

REPO = Path(__file__).resolve().parents[2]
PAIRS = [
    ("proto/inference.proto", "sluice/v1/torchserve_inference.proto"),
    ("proto/management.proto", "sluice/v1/torchserve_management.proto"),
]


def _descriptor_set(include: Path, source: str, out: Path) -> descriptor_pb2.FileDescriptorSet:
    googleapis = Path(next(iter(google.rpc.__path__))).parent.parent
    well_known = resources.files("grpc_tools") / "_proto"
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{include}",
            f"-I{well_known}",
            f"-I{googleapis}",
            f"--descriptor_set_out={out}",
            str(include / source),
        ]
    )
    assert code == 0
    descriptors = descriptor_pb2.FileDescriptorSet()
    descriptors.ParseFromString(out.read_bytes())
    return descriptors


def _shape(file: descriptor_pb2.FileDescriptorProto) -> dict[str, object]:
    def fields(message: descriptor_pb2.DescriptorProto) -> object:
        return {
            "fields": sorted(
                (f.number, f.name, f.type, f.label, f.type_name, f.proto3_optional) for f in message.field
            ),
            "nested": {n.name: fields(n) for n in message.nested_type},
            "oneofs": [o.name for o in message.oneof_decl if not o.name.startswith("_")],
        }

    return {
        "package": file.package,
        "messages": {m.name: fields(m) for m in file.message_type},
        "services": {
            s.name: sorted(
                (m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming)
                for m in s.method
            )
            for s in file.service
        },
    }


@pytest.mark.parametrize(("theirs", "ours"), PAIRS)
def test_proto_matches_torchserve(tmp_path: Path, theirs: str, ours: str) -> None:
    with zipfile.ZipFile(jar_path()) as jar:
        jar.extract(theirs, tmp_path / "ts")
    torchserve = _descriptor_set(tmp_path / "ts" / "proto", Path(theirs).name, tmp_path / "ts.pb")
    sluice = _descriptor_set(REPO / "proto", ours, tmp_path / "ours.pb")
    assert _shape(sluice.file[-1]) == _shape(torchserve.file[-1])
