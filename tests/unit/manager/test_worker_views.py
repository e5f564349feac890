"""Where Describe says a worker runs: a container's engine and short id, a swarm worker's node."""

from sluice_manager.api.model_views import worker_json
from sluice_manager.api.version_views import worker_views
from sluice_manager.supervision.launchers.base import CONTAINER, NODE, LaunchRecord, Placement


def launched(worker_id: str, host: str, **details: str) -> LaunchRecord:
    return LaunchRecord(
        worker_id=worker_id, model_name="m", version="1.0", launcher="x", handle="h",
        placement=Placement(host=host), started_unix_ms=1, details=details,
    )  # fmt: skip


def test_container_and_swarm_workers_say_where_they_run_and_a_process_does_not() -> None:
    records = [
        launched("1", "engine", **{CONTAINER: "abc123"}),
        launched("2", "swarm", **{NODE: "sluice-node-2"}),
        launched("3", "host"),
    ]
    container, swarm, process = (worker_json(view) for view in worker_views(records, {}, {}))
    assert (container["host"], container["container"], "node" in container) == ("engine", "abc123", False)
    assert swarm["node"] == "sluice-node-2"
    assert "host" not in swarm, "no container id known: only the node"
    assert not {"host", "container", "node"} & set(process)
