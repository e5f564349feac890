"""The ``docker`` launcher: one container per worker replica, through the Docker Engine API
(``aiodocker``: asyncio on aiohttp, which the services already use; never the CLI).

A worker container runs the configured worker image with ``python -m sluice_worker <arguments>``,
labelled ``io.sluice.cluster``, ``io.sluice.model``, ``io.sluice.version`` and ``io.sluice.worker``
(one cluster's manager never touches another's containers), on the network the manager names, with
``init``, no restart policy (the manager restarts workers, with TorchServe's backoff), as the image's
non-root user with a read-only root filesystem (``/tmp`` and ``$HOME`` are tmpfs; downloaded models
go to a per-host cache volume), no new privileges, all capabilities dropped, bounded json-file logs,
and the CPU / memory limits of its :class:`WorkerSpec`. A GPU placement becomes a device request for
that GPU (the NVIDIA container runtime's way); inside the container it is device 0, so the worker
gets ``--gpu-id 0`` while the launch record keeps the host's id.

Exits are noticed through the engine's event stream (``die``, ``oom``) and, as a safety net, on every
:meth:`DockerLauncher.states` (the reconcile pass lists this cluster's containers). A stopped or dead
container is removed once the reconciler releases it, after its last log lines were logged. A
restarted manager adopts running containers by their labels; :meth:`discover` lists those without a
launch record. The manager's own exit leaves the containers running for its successor.
"""

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError
from sluice.log import get_logger

from sluice_manager.supervision.launchers.base import (
    CONTAINER,
    Capacity,
    LaunchRecord,
    Placement,
    RunState,
    Usage,
    Watched,
    WorkerExit,
    WorkerSpec,
)

log = get_logger(__name__)

NAME = "docker"
LABEL_CLUSTER = "io.sluice.cluster"
LABEL_MODEL = "io.sluice.model"
LABEL_VERSION = "io.sluice.version"
LABEL_WORKER = "io.sluice.worker"
# Details of a container worker's launch record.
CONTAINER_NAME = "container_name"
IMAGE = "image"
# Lines of a dead container's log written into the manager's log before the container is removed.
LOG_TAIL_LINES = 20
# The events stream is reopened after this pause when it breaks (the engine restarted, say).
EVENTS_RETRY_S = 1.0
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclass(frozen=True)
class DockerConfig:
    """What every worker container gets."""

    image: str
    cluster_id: str
    # The worker program; the worker's arguments follow.
    command: tuple[str, ...] = ("python", "-m", "sluice_worker")
    # The network the workers join ("" for the engine's default bridge).
    network: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    # Named volume for downloaded models, shared by the workers of one host ("" for none).
    cache_volume: str = ""
    cache_path: str = "/var/cache/sluice"
    read_only_root: bool = True
    # Host GPUs the workers may be given (the manager cannot see the engine's host: set by settings).
    gpu_ids: tuple[int, ...] = ()
    log_max_bytes: int = 10 * 1024 * 1024
    log_files: int = 3


def container_name(cluster_id: str, spec: WorkerSpec) -> str:
    raw = f"sluice-{cluster_id}-{spec.model_name}-{spec.version}-{spec.worker_id}"
    return _NAME_UNSAFE.sub("-", raw)[:200]


def labels(cluster_id: str, spec: WorkerSpec) -> dict[str, str]:
    return {
        LABEL_CLUSTER: cluster_id,
        LABEL_MODEL: spec.model_name,
        LABEL_VERSION: spec.version,
        LABEL_WORKER: spec.worker_id,
    }


def container_config(config: DockerConfig, spec: WorkerSpec) -> dict[str, Any]:
    """The Engine API's create body for ``spec``'s worker container (pure, unit-tested)."""
    gpu = spec.placement.gpu_id
    host: dict[str, Any] = {
        "Init": True,
        "RestartPolicy": {"Name": "no"},
        "ReadonlyRootfs": config.read_only_root,
        "Tmpfs": {"/tmp": "rw,nosuid,nodev", "/home/sluice": "rw,nosuid,nodev"},
        "SecurityOpt": ["no-new-privileges"],
        "CapDrop": ["ALL"],
        "Privileged": False,
        "LogConfig": {
            "Type": "json-file",
            "Config": {"max-size": str(config.log_max_bytes), "max-file": str(config.log_files)},
        },
    }
    if config.network:
        host["NetworkMode"] = config.network
    if spec.limits.cpus > 0:
        host["NanoCpus"] = int(spec.limits.cpus * 1e9)
    if spec.limits.memory_bytes > 0:
        host["Memory"] = spec.limits.memory_bytes
    if config.cache_volume:
        host["Mounts"] = [{"Type": "volume", "Source": config.cache_volume, "Target": config.cache_path}]
    if gpu is not None:
        host["DeviceRequests"] = [{"Driver": "nvidia", "DeviceIDs": [str(gpu)], "Capabilities": [["gpu"]]}]
    env = {**config.env, "SLUICE_MODEL_CACHE_DIR": config.cache_path}
    return {
        "Image": config.image,
        # The container sees its one GPU as device 0.
        "Cmd": [*config.command, *spec.arguments(gpu_id=0 if gpu is not None else None)],
        "Env": [f"{key}={value}" for key, value in sorted(env.items())],
        "Labels": labels(config.cluster_id, spec),
        "HostConfig": host,
    }


async def own_network(client: aiodocker.Docker, hostname: str) -> str:
    """The network of the manager's own container (in compose: the stack's network), found by
    inspecting the container whose id the hostname is; "" outside a container (the engine's default
    bridge, where workers cannot resolve service names: set ``sluice_docker_network`` then)."""
    try:
        container = await client.containers.get(hostname)
    except DockerError:
        return ""
    networks = sorted((container["NetworkSettings"] or {}).get("Networks") or {})
    user_defined = [name for name in networks if name not in ("bridge", "host", "none")]
    return str((user_defined or networks or [""])[0])


class DockerLauncher:
    name = NAME
    can_start = True
    # Containers outlive the manager: a restarted manager adopts them (`make compose-down` removes
    # them with the stack).
    workers_outlive_manager = True

    def __init__(self, docker: aiodocker.Docker, config: DockerConfig) -> None:
        self._docker = docker
        self._config = config
        self._watched: dict[str, Watched] = {}
        self._exits: asyncio.Queue[WorkerExit] = asyncio.Queue()
        self._events: asyncio.Task[None] | None = None
        self._host = ""
        self._cpus = 1

    # Lifecycle -----------------------------------------------------------------------------------
    async def prepare(self) -> None:
        info = await self._docker.system.info()
        self._host = str(info.get("Name") or "docker")
        self._cpus = int(info.get("NCPU") or 1)
        if self._events is None:
            self._events = asyncio.create_task(self._follow_events(), name="docker-events")
        log.info("docker engine ready", engine=self._host, cpus=self._cpus, image=self._config.image,
                 network=self._config.network or "default", cluster=self._config.cluster_id)  # fmt: skip

    async def capacity(self) -> Capacity:
        if not self._host:
            await self.prepare()
        return Capacity(host=self._host, cpus=self._cpus, gpu_ids=self._config.gpu_ids)

    async def aclose(self) -> None:
        if self._events is not None:
            self._events.cancel()
            await asyncio.wait([self._events], timeout=5.0)
            self._events = None
        await self._docker.events.stop()  # type: ignore[no-untyped-call]
        await self._docker.close()

    # Workers -------------------------------------------------------------------------------------
    async def start(self, spec: WorkerSpec) -> LaunchRecord:
        name = container_name(self._config.cluster_id, spec)
        try:
            container = await self._docker.containers.create(container_config(self._config, spec), name=name)
        except DockerError as exc:
            raise OSError(f"cannot create worker container {name}: {exc.message}") from exc
        try:
            await container.start()
        except DockerError as exc:
            await _quietly(container.delete(force=True))
            raise OSError(f"cannot start worker container {name}: {exc.message}") from exc
        record = LaunchRecord(
            worker_id=spec.worker_id,
            model_name=spec.model_name,
            version=spec.version,
            launcher=self.name,
            handle=container.id,
            placement=spec.placement,
            started_unix_ms=int(time.time() * 1000),
            details={CONTAINER_NAME: name, CONTAINER: container.id[:12], IMAGE: self._config.image},
        )
        self._watched[spec.worker_id] = Watched(record)
        log.info(
            "worker container started",
            model=spec.model_name,
            version=spec.version,
            worker=spec.worker_id,
            container=container.id[:12],
            gpu_id=spec.placement.gpu_id,
        )
        return record

    async def stop(self, worker_id: str, *, graceful: bool) -> None:
        watched = self._watched.get(worker_id)
        if watched is None or watched.exited:
            return
        try:
            await self._docker.containers.container(watched.record.handle).kill(
                signal="SIGTERM" if graceful else "SIGKILL"
            )
        except DockerError as exc:
            if exc.status not in (404, 409):  # gone, or not running any more
                raise OSError(f"cannot signal worker container: {exc.message}") from exc

    async def states(self) -> dict[str, RunState]:
        running = await self._running_ids()
        for worker_id, watched in self._watched.items():
            if not watched.exited and watched.record.handle not in running:
                # The event was missed (the stream was down): report the exit now.
                await self._report_exit(worker_id, watched)
        return {
            worker_id: RunState.EXITED if watched.exited else RunState.RUNNING
            for worker_id, watched in self._watched.items()
        }

    async def adopt(self, records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
        running = {
            container["Labels"].get(LABEL_WORKER, ""): container
            for container in await self._cluster_containers()
            if container["State"] == "running"
        }
        adopted: list[LaunchRecord] = []
        for record in records:
            found = running.get(record.worker_id)
            if found is None or record.launcher != self.name or record.worker_id in self._watched:
                continue
            # The container is the truth about the handle (a record may come from an announcement).
            details = {**record.details, CONTAINER: found["Id"][:12]}
            record = record.model_copy(update={"handle": found["Id"], "details": details})
            self._watched[record.worker_id] = Watched(record)
            adopted.append(record)
            log.info("worker container adopted", model=record.model_name, version=record.version,
                     worker=record.worker_id, container=found["Id"][:12])  # fmt: skip
        return adopted

    async def discover(self) -> list[LaunchRecord]:
        found: list[LaunchRecord] = []
        for container in await self._cluster_containers():
            labels_ = container["Labels"]
            worker_id = labels_.get(LABEL_WORKER, "")
            if not worker_id or worker_id in self._watched or container["State"] != "running":
                continue
            found.append(
                LaunchRecord(
                    worker_id=worker_id,
                    model_name=labels_.get(LABEL_MODEL, ""),
                    version=labels_.get(LABEL_VERSION, ""),
                    launcher=self.name,
                    handle=container["Id"],
                    placement=Placement(host=self._host),
                    started_unix_ms=int(container.get("Created", 0)) * 1000,
                    details={
                        CONTAINER_NAME: (container.get("Names") or ["/"])[0].lstrip("/"),
                        CONTAINER: container["Id"][:12],
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
        await _quietly(self._docker.containers.container(watched.record.handle).delete(force=True))

    async def usage(self, records: Sequence[LaunchRecord]) -> dict[str, Usage]:
        mine = [r for r in records if r.launcher == self.name and r.worker_id in self._watched]
        measured = await asyncio.gather(*(self._memory(r.handle) for r in mine))
        return {
            r.worker_id: Usage(memory_bytes=m) for r, m in zip(mine, measured, strict=True) if m is not None
        }

    # Engine queries ------------------------------------------------------------------------------
    def _cluster_filter(self, **extra: list[str]) -> str:
        filters: dict[str, list[str]] = {"label": [f"{LABEL_CLUSTER}={self._config.cluster_id}"], **extra}
        return json.dumps(filters)

    async def _cluster_containers(self) -> list[dict[str, Any]]:
        """This cluster's worker containers, running or not, as the list endpoint describes them."""
        containers = await self._docker.containers.list(all=True, filters=self._cluster_filter())
        return [
            {
                "Id": c.id,
                "State": c["State"],
                "Labels": c["Labels"] or {},
                "Created": c["Created"],
                "Names": c["Names"] or [],
            }
            for c in containers
        ]

    async def _running_ids(self) -> set[str]:
        return {c["Id"] for c in await self._cluster_containers() if c["State"] == "running"}

    async def _memory(self, container_id: str) -> int | None:
        """The container's memory use as ``docker stats`` shows it (page cache excluded). One-shot
        stats (API 1.41) answer at once; aiodocker's ``stats(stream=False)`` waits for two samples
        (~2 s), too slow for DescribeModel, hence its lower-level query."""
        try:
            stats: Any = await self._docker._query_json(
                f"containers/{container_id}/stats", params={"stream": "0", "one-shot": "1"}
            )
        except DockerError:
            return None
        memory = stats.get("memory_stats") or {}
        usage = int(memory.get("usage") or 0)
        cache = int((memory.get("stats") or {}).get("inactive_file") or 0)
        return max(usage - cache, 0) if usage else None

    # Exits ---------------------------------------------------------------------------------------
    async def _follow_events(self) -> None:
        filters = self._cluster_filter(type=["container"], event=["die"])
        while True:
            subscriber = self._docker.events.subscribe(filters=filters)  # type: ignore[no-untyped-call]
            while (event := await subscriber.get()) is not None:
                try:
                    await self._on_event(event)
                except DockerError as exc:
                    log.warning("docker request failed", error=exc.message)
            # The stream ended (the engine restarted): reopen it; states() covers the gap.
            log.warning("docker events stream lost; reopening")
            await self._docker.events.stop()  # type: ignore[no-untyped-call]
            await asyncio.sleep(EVENTS_RETRY_S)

    async def _on_event(self, event: Mapping[str, Any]) -> None:
        attributes = (event.get("Actor") or {}).get("Attributes") or {}
        watched = self._watched.get(str(attributes.get(LABEL_WORKER, "")))
        if watched is not None and not watched.exited and watched.record.handle == event.get("id"):
            await self._report_exit(str(attributes[LABEL_WORKER]), watched)

    async def _report_exit(self, worker_id: str, watched: Watched) -> None:
        watched.exited = True
        code, reason = await self._exit_status(watched.record.handle)
        if code not in (0, None) or reason:
            await self._log_tail(watched.record)
        self._exits.put_nowait(WorkerExit(worker_id, code, reason))

    async def _exit_status(self, container_id: str) -> tuple[int | None, str]:
        try:
            info = await self._docker.containers.container(container_id).show()
        except DockerError:
            return None, "container removed"
        state = info.get("State") or {}
        return state.get("ExitCode"), "oom-killed" if state.get("OOMKilled") else ""

    async def _log_tail(self, record: LaunchRecord) -> None:
        try:
            lines = await self._docker.containers.container(record.handle).log(
                stdout=True, stderr=True, tail=LOG_TAIL_LINES
            )
        except DockerError:
            return
        log.warning("worker container log tail", model=record.model_name, version=record.version,
                    worker=record.worker_id, lines=[line.rstrip() for line in lines])  # fmt: skip


async def _quietly(action: Any) -> None:
    try:
        await action
    except DockerError as exc:
        if exc.status != 404:
            log.warning("docker request failed", error=exc.message)
