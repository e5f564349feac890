"""What the ``swarm`` launcher (:mod:`.swarm`) asks Swarm for, and how it reads what Swarm reports:
pure functions of the Engine API's JSON, unit-tested without a swarm."""

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sluice_manager.supervision.launchers.base import Capacity, LaunchRecord, WorkerExit, WorkerSpec
from sluice_manager.supervision.launchers.docker import LABEL_WORKER, DockerConfig, labels

# The launch record's detail naming the node a worker runs on (or is pinned to).
NODE_ID = "node_id"
# Task states a worker has not ended in (Swarm's task state machine up to `running`).
LIVE_STATES = frozenset(
    {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting", "running"}
)
# Swarm service names are DNS name components: letters, digits and "-", at most 63 characters.
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9-]")
NAME_MAX = 63


@dataclass(frozen=True)
class SwarmConfig(DockerConfig):
    """What every worker service gets: a worker container's settings (``network``: the attachable
    overlay the workers join, where Redis and the manager are; ``cache_volume``: one per node), and:"""

    # Placement constraints, as `docker service create --constraint` takes them.
    constraints: tuple[str, ...] = ()
    # The generic resource kind the nodes advertise their GPUs as (``gpu_ids``: all of them).
    gpu_kind: str = "NVIDIA-GPU"
    stop_grace_s: float = 30.0


def service_name(cluster_id: str, spec: WorkerSpec) -> str:
    """Unique per cluster and worker (the worker id comes first, so truncation never drops it)."""
    raw = f"sluice-{cluster_id[:16]}-w{spec.worker_id}-{spec.model_name}-{spec.version}"
    return _NAME_UNSAFE.sub("-", raw)[:NAME_MAX].rstrip("-")


def service_spec(config: SwarmConfig, spec: WorkerSpec, node_id: str = "") -> dict[str, Any]:
    """The Engine API's create body for ``spec``'s worker service, on ``node_id`` when given (pure,
    unit-tested)."""
    gpu = spec.placement.gpu_id
    mounts: list[dict[str, Any]] = [
        {"Type": "tmpfs", "Target": "/tmp"},
        {"Type": "tmpfs", "Target": "/home/sluice"},
    ]
    if config.cache_volume:
        mounts.append({"Type": "volume", "Source": config.cache_volume, "Target": config.cache_path})
    env = {**config.env, "SLUICE_MODEL_CACHE_DIR": config.cache_path}
    container: dict[str, Any] = {
        "Image": config.image,
        # The container sees the one GPU Swarm gave it as device 0.
        "Command": [*config.command, *spec.arguments(gpu_id=0 if gpu is not None else None)],
        "Env": [f"{key}={value}" for key, value in sorted(env.items())],
        "Labels": labels(config.cluster_id, spec),
        "Init": True,
        "ReadOnly": config.read_only_root,
        "Mounts": mounts,
        "CapabilityDrop": ["ALL"],
        "StopGracePeriod": int(config.stop_grace_s * 1e9),
    }
    resources: dict[str, Any] = {}
    limits: dict[str, int] = {}
    if spec.limits.cpus > 0:
        limits["NanoCPUs"] = int(spec.limits.cpus * 1e9)
    if spec.limits.memory_bytes > 0:
        limits["MemoryBytes"] = spec.limits.memory_bytes
    if limits:
        resources["Limits"] = limits
    if gpu is not None:
        resources["Reservations"] = {
            "GenericResources": [{"DiscreteResourceSpec": {"Kind": config.gpu_kind, "Value": 1}}]
        }
    template: dict[str, Any] = {
        "ContainerSpec": container,
        "Resources": resources,
        "RestartPolicy": {"Condition": "none"},
        "Placement": {"Constraints": [*config.constraints, *([f"node.id=={node_id}"] if node_id else [])]},
        "LogDriver": {
            "Name": "json-file",
            "Options": {"max-size": str(config.log_max_bytes), "max-file": str(config.log_files)},
        },
    }
    if config.network:
        template["Networks"] = [{"Target": config.network}]
    return {
        "Name": service_name(config.cluster_id, spec),
        "Labels": labels(config.cluster_id, spec),
        "TaskTemplate": template,
        "Mode": {"Replicated": {"Replicas": 1}},
        # No IPVS needed: workers are reached by no one, they reach Redis and the manager.
        "EndpointSpec": {"Mode": "dnsrr"},
    }


@dataclass(frozen=True)
class TaskView:
    """The facts of one task the launcher acts on."""

    task_id: str
    service_id: str
    state: str
    desired: str
    node_id: str
    exit_code: int | None
    error: str

    @classmethod
    def of(cls, task: Mapping[str, Any]) -> "TaskView":
        status = task.get("Status") or {}
        container = status.get("ContainerStatus") or {}
        code = container.get("ExitCode")
        return cls(
            task_id=str(task.get("ID", "")),
            service_id=str(task.get("ServiceID", "")),
            state=str(status.get("State", "")),
            desired=str(task.get("DesiredState", "")),
            node_id=str(task.get("NodeID", "")),
            # The engine reports 0 for a task that has not ended.
            exit_code=int(code) if code is not None and status.get("State") not in LIVE_STATES else None,
            error=str(status.get("Err", "")),
        )


def ended(task: TaskView | None, down_nodes: set[str], pinned_node: str = "") -> WorkerExit | None:
    """How the worker whose task is ``task`` ended, or None while it lives (``worker_id`` left "":
    the caller knows it). A task waiting for the node it is pinned to dies with that node."""
    if task is None:
        return WorkerExit("", None, "task gone")
    if task.state not in LIVE_STATES:
        return WorkerExit("", task.exit_code, task.error or f"task {task.state}")
    if (task.node_id or pinned_node) in down_nodes:
        return WorkerExit("", None, "node down")
    return None


def pick_node(nodes: Sequence[Mapping[str, Any]], live: Sequence[LaunchRecord], spec: WorkerSpec) -> str:
    """The id of the node for ``spec``'s worker: of the nodes that take tasks, the one with the fewest
    workers of its version, then the fewest of ``live`` (this cluster's running workers), then the
    lowest hostname; "" when no node takes tasks."""
    version = (spec.model_name, spec.version)
    per_version: Counter[str] = Counter()
    per_node: Counter[str] = Counter()
    for record in live:
        node = record.details.get(NODE_ID, "")
        per_node[node] += 1
        if (record.model_name, record.version) == version:
            per_version[node] += 1
    candidates = [(str(node["ID"]), hostname(node)) for node in nodes if takes_tasks(node)]
    if not candidates:
        return ""
    return min(candidates, key=lambda c: (per_version[c[0]], per_node[c[0]], c[1]))[0]


def hostname(node: Mapping[str, Any]) -> str:
    return str((node.get("Description") or {}).get("Hostname") or "")


def takes_tasks(node: Mapping[str, Any]) -> bool:
    return (node.get("Status") or {}).get("State") == "ready" and (node.get("Spec") or {}).get(
        "Availability"
    ) == "active"


def container_labels(task: Mapping[str, Any]) -> Mapping[str, str]:
    return ((task.get("Spec") or {}).get("ContainerSpec") or {}).get("Labels") or {}


def current_task(tasks: Sequence[TaskView]) -> TaskView | None:
    """The task a one-replica service without restarts runs: the one Swarm wants running, else the
    last one it had."""
    wanted = [task for task in tasks if task.desired == "running"]
    candidates = wanted or list(tasks)
    return candidates[-1] if candidates else None


def worker_label(service: Mapping[str, Any]) -> str:
    return str(((service.get("Spec") or {}).get("Labels") or {}).get(LABEL_WORKER, ""))


def name_of_service(service: Mapping[str, Any]) -> str:
    return str((service.get("Spec") or {}).get("Name", ""))


def down_nodes(nodes: Sequence[Mapping[str, Any]]) -> set[str]:
    """The ids of the nodes Swarm marks down."""
    return {str(node["ID"]) for node in nodes if (node.get("Status") or {}).get("State") == "down"}


def node_names(nodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Node id -> hostname."""
    return {str(node["ID"]): hostname(node) or str(node["ID"])[:12] for node in nodes}


def pooled_capacity(host: str, nodes: Sequence[Mapping[str, Any]], gpu_ids: tuple[int, ...]) -> Capacity:
    """The cores of the nodes that take tasks (ready and active), as one pool named ``host``."""
    nanos = sum(
        int(((node.get("Description") or {}).get("Resources") or {}).get("NanoCPUs") or 0)
        for node in nodes
        if takes_tasks(node)
    )
    return Capacity(host=host, cpus=max(1, nanos // 1_000_000_000), gpu_ids=gpu_ids)
