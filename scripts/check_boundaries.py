"""Architecture boundaries, checked rather than hoped for:
services never import each other; only the worker imports torch or TorchServe's ``ts`` package;
``sluice.errors`` imports no transport."""

import ast
import sys
from pathlib import Path

SERVICES = {
    "sluice_gateway": Path("services/gateway/sluice_gateway"),
    "sluice_worker": Path("services/worker/sluice_worker"),
    "sluice_manager": Path("services/manager/sluice_manager"),
    "sluice_cli": Path("services/cli/sluice_cli"),
    "sluice": Path("services/shared/sluice"),
}
WORKER_ONLY = {"torch", "ts", "numpy"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def violations() -> list[str]:
    found: list[str] = []
    for package, folder in SERVICES.items():
        for path in folder.rglob("*.py"):
            if "/v1/" in path.as_posix():
                continue
            roots = imported_roots(path)
            for other in SERVICES.keys() - {package, "sluice"}:
                if other in roots:
                    found.append(f"{path}: imports {other} (services never import each other)")
            if package != "sluice_worker":
                for name in sorted(roots & WORKER_ONLY):
                    found.append(f"{path}: imports {name} (only the worker may)")
            if path.name == "errors.py" and package == "sluice" and roots & {"grpc", "aiohttp"}:
                found.append(f"{path}: sluice.errors must not import a transport")
    return found


if __name__ == "__main__":
    problems = violations()
    for line in problems:
        print(line)
    sys.exit(1 if problems else 0)
