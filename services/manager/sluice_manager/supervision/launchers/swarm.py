"""The ``swarm`` launcher: workers as Docker Swarm services, placed by Swarm over the swarm's nodes.

The manager talks to a swarm manager's Engine API (``aiodocker``, as the docker launcher does, through
the same filtered proxy). Each worker is **one service with one replica**, labelled
``io.sluice.cluster`` / ``io.sluice.model`` / ``io.sluice.version`` / ``io.sluice.worker``, so
``docker service ls --filter label=io.sluice.version=1.0`` lists a version's workers, and Swarm runs
them on its nodes.

Why a service per worker rather than one service per version with ``replicas`` = its worker count:
the reconciler decides *which* worker drains when a version scales down (an idle one, never one that
holds a sequence), and a worker's id is its consumer name in the version's job stream. Swarm's
scale-down picks the task to stop by node balance, and the replica that replaces a task would need an
id of its own; a service per worker keeps both decisions with the reconciler and still leaves
placement, rescheduling onto live nodes and image distribution to Swarm.

- **Restart**: the services have no restart policy (``Condition: none``): as with containers, the
  manager restarts workers (TorchServe's backoff), each time as a new worker and a new service.
- **Exits**: a worker has ended when the task it was started with is past ``running`` (its exit code
  read from the task), when that task is gone, or when the node it runs on is ``down`` (the engine
  still shows a dead node's task as running). Found by polling the task list every
  :data:`POLL_S` (Swarm has no task events), and on every :meth:`SwarmLauncher.states`.
- **Stopping** removes the service: the node's engine sends SIGTERM, then SIGKILL after the service's
  stop grace period (the manager's ``worker_stop_timeout_s``). A "kill" can do no better than that
  through the swarm API: the manager cannot signal a container on another node.
- **Spread**: Swarm's scheduler balances the *tasks* per node, whatever they run (the stack's own
  services count as much as a worker), so by itself it may leave a node without a worker or put a
  version's workers together. The launcher places a CPU worker itself, with a ``node.id``
  constraint: on the node that takes tasks and holds the fewest workers of that version, then the
  fewest workers of this cluster (:func:`pick_node`). With GPUs (generic resources) or configured
  constraints Swarm's scheduler places the worker: only it knows which node has room.
- **Node**: :meth:`SwarmLauncher.start` waits (bounded) for Swarm to assign the task, and records
  the node, whose hostname DescribeModel shows.
- **Memory**: containers on other nodes cannot be measured from the manager: Describe shows what each
  worker reports of itself.
- **GPUs**: a GPU placement reserves one generic resource of the configured kind (``NVIDIA-GPU``,
  advertised by the nodes' engines); the container sees the GPU Swarm gave it as device 0.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError
from sluice.log import get_logger

from sluice_manager.supervision.launchers.base import (
    NODE,
    Capacity,
    LaunchRecord,
    Placement,
    RunState,
    Usage,
    Watched,
    WorkerExit,
    WorkerSpec,
)
from sluice_manager.supervision.launchers.docker import LABEL_CLUSTER, LABEL_MODEL, LABEL_VERSION
from sluice_manager.supervision.launchers.swarm_spec import (
    LIVE_STATES,
    NODE_ID,
    SwarmConfig,
    TaskView,
    container_labels,
    current_task,
    down_nodes,
    ended,
    name_of_service,
    node_names,
    pick_node,
    pooled_capacity,
    service_spec,
    worker_label,
)

log = get_logger(__name__)

NAME = "swarm"
HOST = "swarm"
# Details of a swarm worker's launch record.
SERVICE_NAME = "service_name"
TASK = "task"
POLL_S = 1.0
# How long start() waits for Swarm to give the task a node.
ASSIGN_WAIT_S = 10.0


class SwarmLauncher:
    name = NAME
    can_start = True
    # Services outlive the manager: a restarted manager adopts them (`make swarm-down` removes them).
    workers_outlive_manager = True

    def __init__(self, docker: aiodocker.Docker, config: SwarmConfig) -> None:
        self._docker = docker
        self._config = config
        self._watched: dict[str, Watched] = {}
        self._exits: asyncio.Queue[WorkerExit] = asyncio.Queue()
        self._poller: asyncio.Task[None] | None = None
        # One look at the swarm at a time: the poller and states() report each exit once.
        self._look = asyncio.Lock()

    # Lifecycle -----------------------------------------------------------------------------------
    async def prepare(self) -> None:
        try:
            info = await self._docker.system.info()
        except DockerError as exc:
            raise OSError(f"the swarm manager's engine answers: {exc.message}") from exc
        swarm = info.get("Swarm") or {}
        if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
            raise OSError(
                f"the engine {info.get('Name', '?')} is not a swarm manager "
                f"(swarm state {swarm.get('LocalNodeState') or 'inactive'}): the swarm launcher needs one"
            )
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name="swarm-tasks")
        nodes = await self._nodes()
        capacity = pooled_capacity(HOST, nodes, self._config.gpu_ids)
        log.info("swarm ready", nodes=len(nodes), cpus=capacity.cpus, image=self._config.image,
                 network=self._config.network or "none", cluster=self._config.cluster_id)  # fmt: skip

    async def capacity(self) -> Capacity:
        return pooled_capacity(HOST, await self._nodes(), self._config.gpu_ids)

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.wait([self._poller], timeout=5.0)
            self._poller = None
        await self._docker.close()

    # Workers -------------------------------------------------------------------------------------
    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        nodes = await self._nodes()
        pinned = ""
        if spec.placement.gpu_id is None and not self._config.constraints:
            live = [w.record for w in self._watched.values() if not w.exited]
            pinned = pick_node(nodes, live, spec)
        body = service_spec(self._config, spec, pinned)
        name = body["Name"]
        try:
            # The raw create: aiodocker's services.create() rebuilds the body (a dict environment).
            created = await self._docker._query_json("services/create", method="POST", data=json.dumps(body))
        except DockerError as exc:
            raise OSError(f"cannot create worker service {name}: {exc.message}") from exc
        service_id = str(created["ID"])
        task = await self._first_task(service_id)
        if task is None:
            await self._remove(service_id)
            raise OSError(f"swarm made no task for worker service {name} in {ASSIGN_WAIT_S:.0f} s")
        node_id = task.node_id or pinned
        node = node_names(nodes).get(node_id, "")
        record = LaunchRecord(
            worker_id=spec.worker_id,
            model_name=spec.model_name,
            version=spec.version,
            launcher=self.name,
            handle=service_id,
            placement=spec.placement,
            started_unix_ms=int(time.time() * 1000),
            details={SERVICE_NAME: name, TASK: task.task_id, NODE: node, NODE_ID: node_id},
        )
        self._watched[spec.worker_id] = Watched(record)
        log.info("worker service created", model=spec.model_name, version=spec.version,
                 worker=spec.worker_id, service=name, node=node or "unassigned")  # fmt: skip
        return record

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        watched = self._watched.get(worker_id)
        if watched is None or watched.exited:
            return
        # Graceful or not, removing the service is all the swarm API offers (see the module's notes).
        await self._remove(watched.record.handle)

    async def states(self) -> dict[str, RunState]:
        await self._look_for_exits()
        return {
            worker_id: RunState.EXITED if watched.exited else RunState.RUNNING
            for worker_id, watched in self._watched.items()
        }

    async def adopt(self, records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
        services = {worker_label(s): s for s in await self._cluster_services()}
        tasks, nodes = await self._tasks_by_service(), await self._nodes()
        down, names = down_nodes(nodes), node_names(nodes)
        adopted: list[LaunchRecord] = []
        for record in records:
            service = services.get(record.worker_id)
            if service is None or record.launcher != self.name or record.worker_id in self._watched:
                continue
            task = current_task(tasks.get(str(service["ID"]), []))
            if ended(task, down) is not None:
                # Its worker ended while no manager ran: nothing to adopt, and nothing to keep.
                await self._remove(str(service["ID"]))
                continue
            assert task is not None
            node = names.get(task.node_id, "")
            details = {
                **record.details,
                SERVICE_NAME: name_of_service(service),
                TASK: task.task_id,
                NODE: node,
                NODE_ID: task.node_id,
            }
            record = record.model_copy(update={"handle": str(service["ID"]), "details": details})
            self._watched[record.worker_id] = Watched(record)
            adopted.append(record)
            log.info("worker service adopted", model=record.model_name, version=record.version,
                     worker=record.worker_id, service=details[SERVICE_NAME], node=node)  # fmt: skip
        return adopted

    async def discover(self) -> list[LaunchRecord]:
        tasks, nodes = await self._tasks_by_service(), await self._nodes()
        down, names = down_nodes(nodes), node_names(nodes)
        found: list[LaunchRecord] = []
        for service in await self._cluster_services():
            worker_id = worker_label(service)
            task = current_task(tasks.get(str(service["ID"]), []))
            if not worker_id or worker_id in self._watched:
                continue
            if ended(task, down) is not None:
                # A worker that ended without a launch record (a manager died between creating its
                # service and recording it): its service is left over.
                log.info("ended worker service removed", worker=worker_id, service=name_of_service(service))
                await self._remove(str(service["ID"]))
                continue
            assert task is not None
            service_labels = (service.get("Spec") or {}).get("Labels") or {}
            found.append(
                LaunchRecord(
                    worker_id=worker_id,
                    model_name=service_labels.get(LABEL_MODEL, ""),
                    version=service_labels.get(LABEL_VERSION, ""),
                    launcher=self.name,
                    handle=str(service["ID"]),
                    placement=Placement(host=HOST),
                    started_unix_ms=int(time.time() * 1000),
                    details={
                        SERVICE_NAME: name_of_service(service),
                        TASK: task.task_id,
                        NODE: names.get(task.node_id, ""),
                        NODE_ID: task.node_id,
                    },
                )
            )
        return found

    async def exits(self) -> AsyncIterator[WorkerExit]:
        while True:
            yield await self._exits.get()

    async def release(self, worker_id: str) -> None:
        watched = self._watched.get(worker_id)
        if watched is None or not watched.exited:
            return
        del self._watched[worker_id]
        await self._remove(watched.record.handle)

    async def usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        # Containers on other nodes are out of the manager's reach (see the module's notes).
        return {}

    # Swarm queries -------------------------------------------------------------------------------
    async def _poll(self) -> None:
        while True:
            try:
                await self._look_for_exits()
            except DockerError as exc:
                log.warning("swarm request failed", error=exc.message)
            except OSError as exc:
                log.warning("swarm manager unreachable", error=str(exc))
            await asyncio.sleep(POLL_S)

    async def _look_for_exits(self) -> None:
        async with self._look:
            live = [(wid, w) for wid, w in self._watched.items() if not w.exited]
            if not live:
                return
            tasks, down = await self._tasks_by_id(), down_nodes(await self._nodes())
            for worker_id, watched in live:
                details = watched.record.details
                how = ended(tasks.get(details.get(TASK, "")), down, details.get(NODE_ID, ""))
                if how is not None:
                    watched.exited = True
                    self._exits.put_nowait(WorkerExit(worker_id, how.exit_code, how.reason))
                    log.info("worker task ended", model=watched.record.model_name,
                             version=watched.record.version, worker=worker_id, exit_code=how.exit_code,
                             reason=how.reason, node=watched.record.details.get(NODE, ""))  # fmt: skip

    async def _first_task(self, service_id: str) -> TaskView | None:
        """The service's task once Swarm created it, with its node once assigned (bounded wait)."""
        deadline = time.monotonic() + ASSIGN_WAIT_S
        task: TaskView | None = None
        while time.monotonic() < deadline:
            found = [TaskView.of(t) for t in await self._tasks({"service": [service_id]})]
            task = current_task(found)
            if task is not None and (task.node_id or task.state not in LIVE_STATES):
                return task
            await asyncio.sleep(0.1)
        return task

    async def _tasks(self, filters: Mapping[str, list[str]] | None = None) -> list[Mapping[str, Any]]:
        return await self._docker.tasks.list(filters=filters)

    async def _cluster_tasks(self) -> list[TaskView]:
        """This cluster's worker tasks (every task carries its service's container labels)."""
        return [
            TaskView.of(task)
            for task in await self._tasks()
            if container_labels(task).get(LABEL_CLUSTER) == self._config.cluster_id
        ]

    async def _tasks_by_id(self) -> dict[str, TaskView]:
        return {task.task_id: task for task in await self._cluster_tasks()}

    async def _tasks_by_service(self) -> dict[str, list[TaskView]]:
        grouped: dict[str, list[TaskView]] = {}
        for task in await self._cluster_tasks():
            grouped.setdefault(task.service_id, []).append(task)
        return grouped

    async def _cluster_services(self) -> list[Mapping[str, Any]]:
        return await self._docker.services.list(
            filters={"label": [f"{LABEL_CLUSTER}={self._config.cluster_id}"]}
        )

    async def _nodes(self) -> list[Mapping[str, Any]]:
        return await self._docker.nodes.list()

    async def _remove(self, service_id: str) -> None:
        try:
            await self._docker.services.delete(service_id)
        except DockerError as exc:
            if exc.status != 404:
                raise OSError(f"cannot remove worker service: {exc.message}") from exc
