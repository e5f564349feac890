"""Generate Python, gRPC and .pyi modules from proto/ (run by `make proto`; output is gitignored)."""

import sys
from importlib import resources
from pathlib import Path

import google.rpc  # googleapis-common-protos ships google/rpc/*.proto beside its modules
from grpc_tools import protoc


def main(proto_root: str, out_root: str) -> int:
    sources = sorted(str(p) for p in Path(proto_root).rglob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    bin_dir = Path(sys.executable).parent
    googleapis = str(Path(next(iter(google.rpc.__path__))).parent.parent)
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"-I{googleapis}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *sources,
    ]
    code = protoc.main(args)
    if code == 0:
        for package in {Path(out_root, Path(s).relative_to(proto_root).parent) for s in sources}:
            (package / "__init__.py").touch()
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
