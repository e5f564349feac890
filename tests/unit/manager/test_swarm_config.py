"""What the swarm launcher asks Swarm for, and how it reads a task's fate (pure: no swarm needed).
The launcher itself (swarm.py) runs against a real multi-node swarm in tests/swarm."""

from typing import Any

from sluice_manager.supervision.launchers.base import (
    Capacity,
    ContainerLimits,
    LaunchRecord,
    Placement,
    WorkerExit,
    WorkerSpec,
)
from sluice_manager.supervision.launchers.swarm_spec import (
    NAME_MAX,
    NODE_ID,
    SwarmConfig,
    TaskView,
    down_nodes,
    ended,
    node_names,
    pick_node,
    pooled_capacity,
    service_name,
    service_spec,
)

CONFIG = SwarmConfig(
    image="127.0.0.1:5000/sluice-worker:dev",
    cluster_id="c1",
    network="sluice-swarm",
    env={"SLUICE_REDIS_URL": "redis://redis:6379/0"},
    cache_volume="sluice-model-cache",
    constraints=("node.labels.pool==cpu",),
    stop_grace_s=20.0,
)


def worker(
    gpu_id: int | None = None, limits: ContainerLimits | None = None, worker_id: str = "9001"
) -> WorkerSpec:
    placement = Placement(host="swarm", torch_threads=2, gpu_id=gpu_id)
    return WorkerSpec("mnist", "1.0", worker_id, placement, limits or ContainerLimits())


def test_a_worker_is_one_labelled_confined_unrestarted_service() -> None:
    body = service_spec(CONFIG, worker())
    task = body["TaskTemplate"]
    container = task["ContainerSpec"]
    labels = {
        "io.sluice.cluster": "c1",
        "io.sluice.model": "mnist",
        "io.sluice.version": "1.0",
        "io.sluice.worker": "9001",
    }
    assert body["Labels"] == container["Labels"] == labels
    assert body["Mode"] == {"Replicated": {"Replicas": 1}}
    assert body["EndpointSpec"] == {"Mode": "dnsrr"}, "this kernel has no IPVS for a virtual IP"
    assert container["Command"] == [
        "python", "-m", "sluice_worker", "--model-name", "mnist", "--model-version", "1.0",
        "--worker-id", "9001", "--torch-threads", "2",
    ]  # fmt: skip
    assert "SLUICE_REDIS_URL=redis://redis:6379/0" in container["Env"]
    assert "SLUICE_MODEL_CACHE_DIR=/var/cache/sluice" in container["Env"]
    assert (container["Init"], container["ReadOnly"], container["CapabilityDrop"]) == (True, True, ["ALL"])
    assert container["StopGracePeriod"] == 20 * 10**9
    assert task["RestartPolicy"] == {"Condition": "none"}, "the manager owns restarts"
    assert task["Networks"] == [{"Target": "sluice-swarm"}]
    assert task["Placement"] == {"Constraints": ["node.labels.pool==cpu"]}
    assert {"Type": "volume", "Source": "sluice-model-cache", "Target": "/var/cache/sluice"} in container[
        "Mounts"
    ]
    assert not any(mount["Type"] == "bind" for mount in container["Mounts"])
    assert task["Resources"] == {}


def test_limits_and_a_gpu_become_swarm_resources() -> None:
    body = service_spec(CONFIG, worker(gpu_id=3, limits=ContainerLimits(cpus=1.5, memory_bytes=2**30)))
    resources = body["TaskTemplate"]["Resources"]
    assert resources["Limits"] == {"NanoCPUs": 1_500_000_000, "MemoryBytes": 2**30}
    assert resources["Reservations"] == {
        "GenericResources": [{"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 1}}]
    }
    command = body["TaskTemplate"]["ContainerSpec"]["Command"]
    assert command[-2:] == ["--gpu-id", "0"], "the container sees the GPU Swarm gave it as device 0"


def test_service_names_are_short_unique_per_worker_and_valid() -> None:
    long = WorkerSpec("m" * 80, "1.0", "9001", Placement(host="swarm"))
    name = service_name("cluster-" + "x" * 60, long)
    assert len(name) <= NAME_MAX
    assert "-w9001-" in name, "truncation never drops the worker id"
    assert service_name("c1", worker(worker_id="1")) != service_name("c1", worker(worker_id="2"))
    odd = WorkerSpec("a/b c", "1.0", "7", Placement(host="swarm"))
    assert service_name("c1", odd) == "sluice-c1-w7-a-b-c-1-0", "a DNS name component"


def task(
    state: str, desired: str = "running", node: str = "n1", code: int | None = None, err: str = ""
) -> TaskView:
    raw: dict[str, Any] = {
        "ID": "t1",
        "ServiceID": "s1",
        "NodeID": node,
        "DesiredState": desired,
        "Status": {"State": state, "Err": err, "ContainerStatus": {} if code is None else {"ExitCode": code}},
    }
    return TaskView.of(raw)


def test_a_task_that_lives_has_not_ended() -> None:
    for state in ("pending", "assigned", "preparing", "starting", "running"):
        assert ended(task(state), down_nodes=set()) is None, state
    # Being stopped (desired shutdown) while it still drains: alive until its state says otherwise.
    assert ended(task("running", desired="shutdown"), down_nodes=set()) is None
    assert task("running", code=0).exit_code is None, "the engine's 0 of a running task is no exit code"


def test_an_ended_task_gives_its_exit_code_and_reason() -> None:
    assert ended(task("complete", code=0), down_nodes=set()) == WorkerExit("", 0, "task complete")
    failed = task("failed", code=3, err="task: non-zero exit (3)")
    assert ended(failed, down_nodes=set()) == WorkerExit("", 3, "task: non-zero exit (3)")
    assert ended(task("rejected", err="No such image"), down_nodes=set()) == WorkerExit(
        "", None, "No such image"
    )


def test_a_task_gone_or_on_a_down_node_has_ended() -> None:
    assert ended(None, down_nodes=set()) == WorkerExit("", None, "task gone")
    # The engine goes on showing a dead node's task as running.
    dead = task("running", desired="shutdown", node="n2")
    assert ended(dead, down_nodes={"n2"}) == WorkerExit("", None, "node down")


def node(node_id: str, hostname: str, state: str = "ready", availability: str = "active") -> dict[str, Any]:
    return {
        "ID": node_id,
        "Description": {"Hostname": hostname},
        "Status": {"State": state},
        "Spec": {"Availability": availability},
    }


def running_on(node_id: str, model: str = "mnist", version: str = "1.0") -> LaunchRecord:
    spec = WorkerSpec(model, version, "1", Placement(host="swarm"))
    return LaunchRecord(
        worker_id=spec.worker_id, model_name=model, version=version, launcher="swarm", handle="s",
        placement=spec.placement, started_unix_ms=0, details={NODE_ID: node_id},
    )  # fmt: skip


def test_a_cpu_worker_goes_where_its_version_has_the_fewest_workers() -> None:
    nodes = [node("a", "n1"), node("b", "n2"), node("c", "n3")]
    assert pick_node(nodes, [], worker()) == "a", "the lowest hostname when nothing runs"
    # a and c hold a worker of this version, b only workers of another: b.
    live = [running_on("a"), running_on("b", model="other"), running_on("b", model="other"), running_on("c")]
    assert pick_node(nodes, live, worker()) == "b"
    # Among nodes equal for the version, the one with the fewest workers in all.
    live = [running_on("a", model="other"), running_on("a", model="other"), running_on("b", model="other")]
    assert pick_node(nodes, live, worker()) == "c"


def test_only_nodes_that_take_tasks_are_picked() -> None:
    nodes = [node("a", "n1", availability="drain"), node("b", "n2", state="down"), node("c", "n3")]
    assert pick_node(nodes, [running_on("c")] * 3, worker()) == "c"
    assert pick_node(nodes[:2], [], worker()) == ""


def test_a_pinned_worker_is_constrained_to_its_node_and_dies_with_it() -> None:
    body = service_spec(CONFIG, worker(), node_id="b")
    assert body["TaskTemplate"]["Placement"]["Constraints"] == ["node.labels.pool==cpu", "node.id==b"]
    waiting = task("pending", node="")
    assert ended(waiting, down_nodes={"b"}, pinned_node="b") == WorkerExit("", None, "node down")
    assert ended(waiting, down_nodes=set(), pinned_node="b") is None


def test_one_node_list_gives_the_down_nodes_their_names_and_the_pooled_cores() -> None:
    nodes = [node("a", "n1"), node("b", "n2", state="down"), node("c", "", availability="drain")]
    for entry, cpus in zip(nodes, (2, 4, 8), strict=True):
        entry["Description"]["Resources"] = {"NanoCPUs": cpus * 10**9}
    assert down_nodes(nodes) == {"b"}
    assert node_names(nodes) == {"a": "n1", "b": "n2", "c": "c"}
    assert pooled_capacity("swarm", nodes, (0,)) == Capacity(host="swarm", cpus=2, gpu_ids=(0,))
