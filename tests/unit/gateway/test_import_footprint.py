"""The gateway's memory target (60 MiB idle, bench/README) rests on what it does not import."""

import subprocess
import sys

# Each cost the running gateway megabytes: pydantic ~12 MiB (records and settings are sluice.typed
# dataclasses), redis-py ~6 MiB (its control plane runs on sluice.redis.control); OpenTelemetry loads
# only when tracing is on.
KEPT_OUT = ("pydantic", "pydantic_core", "redis", "opentelemetry")


def test_no_gateway_module_imports_pydantic_redis_py_or_opentelemetry() -> None:
    script = (
        "import importlib, pkgutil, sys, sluice_gateway\n"
        "for module in pkgutil.walk_packages(sluice_gateway.__path__, 'sluice_gateway.'):\n"
        "    importlib.import_module(module.name)\n"
        f"print(sorted(name for name in sys.modules if name.split('.')[0] in {KEPT_OUT!r}))\n"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
