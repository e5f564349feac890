"""What the docker launcher asks the engine for (pure: no engine needed)."""

from sluice_manager.supervision.launchers.base import ContainerLimits, Placement, WorkerSpec
from sluice_manager.supervision.launchers.docker import DockerConfig, container_config, container_name
from sluice_manager.supervision.launchers.registry import extra_worker_env

CONFIG = DockerConfig(
    image="local/sluice-worker:dev",
    cluster_id="c1",
    network="stack_default",
    env={"SLUICE_REDIS_URL": "redis://redis:6379/0"},
    cache_volume="sluice-model-cache",
)


def worker(gpu_id: int | None = None, limits: ContainerLimits | None = None) -> WorkerSpec:
    placement = Placement(host="engine", torch_threads=2, gpu_id=gpu_id)
    return WorkerSpec("mnist", "1.0", "9001", placement, limits or ContainerLimits())


def test_a_worker_container_is_labelled_confined_and_unrestarted() -> None:
    body = container_config(CONFIG, worker())
    host = body["HostConfig"]
    assert body["Image"] == "local/sluice-worker:dev"
    assert body["Cmd"] == [
        "python", "-m", "sluice_worker", "--model-name", "mnist", "--model-version", "1.0",
        "--worker-id", "9001", "--torch-threads", "2",
    ]  # fmt: skip
    assert body["Labels"] == {
        "io.sluice.cluster": "c1",
        "io.sluice.model": "mnist",
        "io.sluice.version": "1.0",
        "io.sluice.worker": "9001",
    }
    assert "SLUICE_REDIS_URL=redis://redis:6379/0" in body["Env"]
    assert "SLUICE_MODEL_CACHE_DIR=/var/cache/sluice" in body["Env"]
    assert host["Init"] is True
    assert host["RestartPolicy"] == {"Name": "no"}, "the manager owns restarts"
    assert host["NetworkMode"] == "stack_default"
    assert host["ReadonlyRootfs"] is True
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Mounts"] == [
        {"Type": "volume", "Source": "sluice-model-cache", "Target": "/var/cache/sluice"}
    ]
    assert host["LogConfig"]["Type"] == "json-file"
    assert "NanoCpus" not in host
    assert "Memory" not in host
    assert "DeviceRequests" not in host


def test_limits_become_engine_limits() -> None:
    host = container_config(CONFIG, worker(limits=ContainerLimits(cpus=1.5, memory_bytes=2**31)))[
        "HostConfig"
    ]
    assert (host["NanoCpus"], host["Memory"]) == (1_500_000_000, 2**31)


def test_a_gpu_placement_asks_for_that_gpu_and_the_worker_sees_it_as_device_0() -> None:
    body = container_config(CONFIG, worker(gpu_id=3))
    assert body["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["3"], "Capabilities": [["gpu"]]}
    ]
    assert body["Cmd"][-2:] == ["--gpu-id", "0"]


def test_names_are_safe_for_the_engine() -> None:
    assert container_name("c1", worker()) == "sluice-c1-mnist-1.0-9001"
    assert container_name("c1", WorkerSpec("a_b", "v+1", "9", Placement(host="h"))) == "sluice-c1-a_b-v-1-9"


def test_extra_worker_environment() -> None:
    manager_env = {"HF_HOME": "/cache", "SECRET": "x"}
    assert extra_worker_env("HF_HOME, MODE=fast,MISSING,", manager_env) == {
        "HF_HOME": "/cache",
        "MODE": "fast",
    }
    assert extra_worker_env("", manager_env) == {}
