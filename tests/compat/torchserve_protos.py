"""TorchServe's own .proto files, taken at test time from the jar inside the torchserve 0.12.0 wheel
(never committed), compiled into client stubs in a temporary folder.

The compat tier imports only these stubs, never Sluice's own generated modules: both declare the
same protobuf packages, which cannot live in one process.
"""

import importlib
import sys
import zipfile
from importlib import resources
from pathlib import Path
from types import ModuleType

import google.rpc
from grpc_tools import protoc

JAR_PROTOS = ("proto/inference.proto", "proto/management.proto", "proto/open_inference_grpc.proto")


def jar_path() -> Path:
    import ts  # the torchserve wheel's package; its jar carries the protos

    return Path(next(iter(ts.__path__))) / "frontend" / "model-server.jar"


def compile_stubs(out_dir: Path) -> Path:
    """Extract TorchServe's protos and generate ``*_pb2`` / ``*_pb2_grpc`` modules in ``out_dir``."""
    proto_dir = out_dir / "protos"
    gen_dir = out_dir / "gen"
    gen_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(jar_path()) as jar:
        for name in JAR_PROTOS:
            jar.extract(name, proto_dir)
    googleapis = Path(next(iter(google.rpc.__path__))).parent.parent
    well_known = resources.files("grpc_tools") / "_proto"
    sources = [str(proto_dir / name) for name in JAR_PROTOS]
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{proto_dir / 'proto'}",
            f"-I{well_known}",
            f"-I{googleapis}",
            f"--python_out={gen_dir}",
            f"--grpc_python_out={gen_dir}",
            *sources,
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed on TorchServe's protos ({code})")
    return gen_dir


def load(gen_dir: Path, module: str) -> ModuleType:
    if str(gen_dir) not in sys.path:
        sys.path.insert(0, str(gen_dir))
    return importlib.import_module(module)
