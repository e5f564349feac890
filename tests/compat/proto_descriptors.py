"""Comparing .proto files by descriptor, without importing generated modules (protoc into a descriptor
set): message fields by name, number, type, label and type name; service methods and their kinds."""

from importlib import resources
from pathlib import Path

import google.rpc
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO = Path(__file__).resolve().parents[2]

Field = tuple[int, int, int, str]


def compile_descriptor(
    source: str, out_dir: Path, include: Path = REPO / "proto"
) -> descriptor_pb2.FileDescriptorProto:
    """``include/source`` compiled by protoc; returns its FileDescriptorProto."""
    googleapis = Path(next(iter(google.rpc.__path__))).parent.parent
    well_known = resources.files("grpc_tools") / "_proto"
    out = out_dir / (Path(source).stem + ".pb")
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
    return descriptors.file[-1]


def message_fields(message: descriptor_pb2.DescriptorProto, prefix: str = "") -> dict[str, Field]:
    """``{"Message.Nested.field": (number, type, label, type name without package)}``."""
    out: dict[str, Field] = {}
    for field in message.field:
        type_name = field.type_name.rsplit(".", 1)[-1]
        out[f"{prefix}{field.name}"] = (field.number, field.type, field.label, type_name)
    for nested in message.nested_type:
        out.update(message_fields(nested, f"{prefix}{nested.name}."))
    return out


def methods(file: descriptor_pb2.FileDescriptorProto) -> dict[str, tuple[str, str, bool, bool]]:
    (service,) = [s for s in file.service if s.name == "GRPCInferenceService"]
    return {
        m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in service.method
    }
