"""scripts/check_boundaries.py on a made-up tree: in the gateway and the worker only app.py and broker/
import Redis (its clients, Sluice's clients or their errors, for type checking too); the manager and
the shared package may. The manager's layers (api -> operations -> models -> stores) import downward
only."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_boundaries.py"
GATEWAY = "services/gateway/sluice_gateway"
WORKER = "services/worker/sluice_worker"
MANAGER = "services/manager/sluice_manager"


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


ALLOWED = {
    f"{GATEWAY}/app.py": "from sluice.redis.control import ControlRedis\n",
    f"{GATEWAY}/broker/redis_reader.py": "from sluice.redis.errors import RedisError\n",
    # Shared modules that are handed a client are not clients.
    f"{GATEWAY}/health.py": "from sluice.registry import reader\nfrom sluice_gateway.broker import seam\n",
    f"{WORKER}/app.py": "import redis.asyncio as aioredis\nfrom sluice.redis import client\n",
    f"{WORKER}/broker/sequences/source.py": "from redis.exceptions import RedisError\n",
    f"{MANAGER}/stores/__init__.py": "import redis.asyncio as aioredis\n",
    # Downward, and from outside the layers (the wiring) to any of them.
    f"{MANAGER}/api/management.py": "from sluice_manager.operations.task_client import TaskClient\n",
    f"{MANAGER}/operations/op_runner.py": "from sluice_manager.models import registration\n",
    f"{MANAGER}/models/registration.py": "from sluice_manager.stores.operations import Operation\n",
    f"{MANAGER}/app.py": "from sluice_manager.api import management\nimport sluice_manager.stores\n",
    "services/shared/sluice/registry/reader.py": "from sluice.redis.control import ControlRedis\n",
}


def test_redis_in_app_and_broker_only_passes(tmp_path: Path) -> None:
    result = check(tree(tmp_path, ALLOWED))
    assert (result.returncode, result.stdout) == (0, "")


@pytest.mark.parametrize(
    ("name", "source", "module"),
    [
        (f"{GATEWAY}/health.py", "from sluice.redis.control import ControlRedis\n", "sluice.redis"),
        (f"{GATEWAY}/kserve/service.py", "from sluice.redis import errors\n", "sluice.redis"),
        (f"{GATEWAY}/metrics/cluster.py", "import sluice.redis.pipelined\n", "sluice.redis"),
        (f"{GATEWAY}/registry_cache.py", "from sluice.redis import keys\n", "sluice.redis"),
        (f"{WORKER}/model_fetch.py", "import redis.asyncio as aioredis\n", "redis"),
        (f"{WORKER}/retries.py", "from redis.exceptions import RedisError\n", "redis"),
        (
            f"{WORKER}/startup.py",
            """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from sluice.redis.client import connect
            """,
            "sluice.redis",
        ),
    ],
)
def test_a_redis_import_outside_broker_fails(tmp_path: Path, name: str, source: str, module: str) -> None:
    result = check(tree(tmp_path, {**ALLOWED, name: source}))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"{name}: imports {module} (only app.py and broker/ may use Redis)"]


@pytest.mark.parametrize(
    ("name", "source", "layer"),
    [
        (
            f"{MANAGER}/models/registration.py",
            "from sluice_manager.operations.task_client import TaskClient\n",
            "operations",
        ),
        (f"{MANAGER}/stores/queued_jobs.py", "from sluice_manager.models import archives\n", "models"),
        (f"{MANAGER}/operations/op_runner.py", "import sluice_manager.api.management\n", "api"),
    ],
)
def test_an_upward_import_between_manager_layers_fails(
    tmp_path: Path, name: str, source: str, layer: str
) -> None:
    result = check(tree(tmp_path, {**ALLOWED, name: source}))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{name}: imports sluice_manager.{layer} (manager layers import downward only)"
    ]


def test_the_repository_passes() -> None:
    result = check(SCRIPT.parents[1])
    assert (result.returncode, result.stdout) == (0, "")
