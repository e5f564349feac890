"""Architecture boundaries, checked rather than hoped for:
services never import each other; only the worker imports torch or TorchServe's ``ts`` package;
``sluice.errors`` imports no transport; in the gateway and the worker only ``app.py`` (the wiring) and
``broker/`` import Redis; the manager's layers import downward only (:data:`MANAGER_LAYERS`).

"Redis", for that rule, is any module of the Redis client libraries (``redis``, ``hiredis``) and of Sluice's
own ``sluice.redis`` package (the keyspace, clients and their errors; :data:`REDIS_MODULES`), whether
imported at run time or for type checking only. Shared modules that are handed a client
(``sluice.registry.reader``, ``sluice.auth.store``, ``sluice.registry.store``) are not on the list: outside
``broker/`` a module has no client to hand them. The check reads import statements; it does not see
``importlib`` calls.

    check_boundaries.py [ROOT]    (ROOT: the repository, by default the one this script is in)
"""

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
REDIS_MODULES = (
    "redis",
    "hiredis",
    "sluice.redis",
)
# Services whose Redis stays behind their broker/ package (and the app.py that wires it).
BROKER_ONLY = {"sluice_gateway", "sluice_worker"}
# The manager's packages, top first: each may import those below it, never one above.
MANAGER_LAYERS = ("api", "operations", "models", "stores")


def imported_names(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, and for ``from a import b`` also ``a.b`` (``b``
    may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def redis_imports(names: set[str]) -> list[str]:
    return sorted(
        module
        for module in REDIS_MODULES
        if any(name == module or name.startswith(f"{module}.") for name in names)
    )


def may_import_redis(package: str, relative: Path) -> bool:
    """``relative``: the file's path inside its package's folder."""
    if package not in BROKER_ONLY:
        return True
    return relative.as_posix() == "app.py" or relative.parts[0] == "broker"


def upward_imports(package: str, relative: Path, names: set[str]) -> list[str]:
    """The manager layers above the one ``relative`` (a path inside its package) is in that ``names``
    import."""
    if package != "sluice_manager" or relative.parts[0] not in MANAGER_LAYERS:
        return []
    above = [f"sluice_manager.{layer}" for layer in MANAGER_LAYERS[: MANAGER_LAYERS.index(relative.parts[0])]]
    return [
        module for module in above if any(name == module or name.startswith(f"{module}.") for name in names)
    ]


def violations(root: Path) -> list[str]:
    found: list[str] = []
    for package, folder in SERVICES.items():
        for path in sorted((root / folder).rglob("*.py")):
            if "/v1/" in path.as_posix():
                continue
            shown = path.relative_to(root)
            names = imported_names(path)
            roots = {name.split(".")[0] for name in names}
            for other in SERVICES.keys() - {package, "sluice"}:
                if other in roots:
                    found.append(f"{shown}: imports {other} (services never import each other)")
            if package != "sluice_worker":
                for name in sorted(roots & WORKER_ONLY):
                    found.append(f"{shown}: imports {name} (only the worker may)")
            if path.name == "errors.py" and package == "sluice" and roots & {"grpc", "aiohttp"}:
                found.append(f"{shown}: sluice.errors must not import a transport")
            relative = path.relative_to(root / folder)
            if not may_import_redis(package, relative):
                for module in redis_imports(names):
                    found.append(f"{shown}: imports {module} (only app.py and broker/ may use Redis)")
            found.extend(
                f"{shown}: imports {module} (manager layers import downward only)"
                for module in upward_imports(package, relative, names)
            )
    return found


if __name__ == "__main__":
    problems = violations(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    for line in problems:
        print(line)
    sys.exit(1 if problems else 0)
