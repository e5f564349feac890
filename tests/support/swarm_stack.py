"""The local multi-node swarm as the swarm tier runs it: ``scripts/swarm_up.sh`` (what ``make swarm-up``
runs) with three nodes, free 127.0.0.1 ports, a model store in a temporary folder, the model API on and
token authorization off; ``scripts/swarm_down.sh`` takes it all down. The engine is reached through the
docker CLI."""

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.redis import keys

from tests.support.compose_stack import docker, wait_for
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
NODES = 3
STACK = "sluicetest"
NETWORK = "sluicetest-swarm"
UP_TIMEOUT_S = 1800
DOWN_TIMEOUT_S = 300
# The registry every engine of the swarm pulls from (scripts/swarm_env.sh).
WORKER_IMAGE = "127.0.0.1:5000/sluice-worker:dev"
LABEL_MODEL = "io.sluice.model"


def unavailable_reason() -> str | None:
    """Why no swarm can run here, or None."""
    try:
        docker("info", "--format", "{{.ServerVersion}}", timeout_s=20)
    except (RuntimeError, subprocess.TimeoutExpired, FileNotFoundError) as exc:
        return f"docker engine unavailable: {exc}"
    return None


@dataclass
class SwarmStack:
    store: Path
    grpc_port: int
    rest_port: int
    management_rest_port: int
    management_port: int
    metrics_port: int

    @classmethod
    def create(cls, root: Path) -> "SwarmStack":
        store = root / "store"
        store.mkdir(parents=True, exist_ok=True)
        store.chmod(0o755)
        return cls(store, *(free_port() for _ in range(5)))

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(
            NODES=str(NODES),
            GATEWAYS="1",
            SWARM_STACK=STACK,
            SWARM_NETWORK=NETWORK,
            MODEL_STORE=str(self.store),
            GATEWAY_PORT=str(self.grpc_port),
            GATEWAY_REST_PORT=str(self.rest_port),
            GATEWAY_METRICS_PORT=str(self.metrics_port),
            MANAGER_PORT=str(self.management_port),
            MANAGER_REST_PORT=str(self.management_rest_port),
            SLUICE_ENABLE_MODEL_API="true",
            SLUICE_DISABLE_TOKEN_AUTHORIZATION="true",
        )
        return env

    def script(self, name: str, timeout_s: float) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / name)],
            env=self.environment(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def up(self) -> None:
        done = self.script("swarm_up.sh", UP_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(
                f"swarm_up.sh failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-4000:]}"
            )

    def down(self) -> "subprocess.CompletedProcess[str]":
        return self.script("swarm_down.sh", DOWN_TIMEOUT_S)

    # The management API (token authorization is off in this stack) ---------------------------------
    def management(self, method: str, path: str, timeout_s: float = 300) -> tuple[int, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.management_rest_port}{path}", method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def management_answers(self) -> bool:
        try:
            return self.management("GET", "/models", timeout_s=5)[0] == 200
        except OSError:
            return False

    def described_workers(self, model: str) -> list[dict[str, Any]]:
        status, body = self.management("GET", f"/models/{model}")
        assert status == 200, body
        workers: list[dict[str, Any]] = body[0]["workers"]
        return workers

    def ready_nodes(self, model: str) -> Counter[str]:
        """READY workers of ``model`` by the node DescribeModel names."""
        return Counter(w.get("node", "") for w in self.described_workers(model) if w["status"] == "READY")

    def wait_for_ready(self, model: str, count: int, timeout_s: float = 240) -> Counter[str]:
        wait_for(
            lambda: sum(self.ready_nodes(model).values()) == count,
            timeout_s,
            f"{count} READY {model} workers",
        )
        return self.ready_nodes(model)

    # The swarm, through the local engine (its manager) ----------------------------------------------
    def worker_services(self, model: str) -> list[str]:
        """IDs of the services the manager made for ``model``'s workers."""
        out = docker("service", "ls", "-q", "--filter", f"label={LABEL_MODEL}={model}")
        return sorted(out.split())

    def service_tasks(self, service: str) -> list[dict[str, str]]:
        """``docker service ps`` of a service: its tasks' node, current and desired state."""
        out = docker("service", "ps", "--no-trunc", "--format", "{{json .}}", service)
        return [json.loads(line) for line in out.splitlines()]

    def task_container(self, worker_id: str) -> str:
        """The running container of a worker whose task runs on this engine ("" if none)."""
        found = docker("ps", "-q", "--filter", f"label=io.sluice.worker={worker_id}").split()
        return found[0] if found else ""

    def nodes(self) -> dict[str, dict[str, str]]:
        """Hostname -> ``docker node ls`` row (Status, Availability, ManagerStatus...)."""
        out = docker("node", "ls", "--format", "{{json .}}")
        return {row["Hostname"]: row for row in map(json.loads, out.splitlines())}

    def set_availability(self, node: str, availability: str) -> None:
        docker("node", "update", "--availability", availability, node)

    def cluster_id(self) -> str:
        """The cluster id the manager labels its worker services with (kept in Redis)."""
        redis = docker("ps", "-q", "--filter", f"label=com.docker.swarm.service.name={STACK}_redis").split()[
            0
        ]
        return docker("exec", redis, "redis-cli", "GET", keys.CLUSTER_ID).strip()

    def manager_node(self) -> str:
        return next(name for name, row in self.nodes().items() if row.get("ManagerStatus"))
