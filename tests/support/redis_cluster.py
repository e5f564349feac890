"""A Redis Cluster of real ``redis-server`` processes on loopback, for tests: three masters (by default)
sharing the 16384 slots, optionally a replica each; a slot can be migrated from one master to another
key by key, as ``redis-cli --cluster reshard`` does it, while clients use it."""

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from sluice.redis.slots import SLOTS, key_slot

from tests.support.redis_server import RedisServer, free_port

NODE_TIMEOUT_MS = 1000
START_TIMEOUT_S = 30.0
# A node's cluster bus listens on its port + 10000: both must be free and below Linux's ephemeral
# range (32768+), so node ports come from 20000-22767.
_BUS_OFFSET = 10000
_HIGHEST_NODE_PORT = 32767 - _BUS_OFFSET


def _node_port() -> int:
    for _ in range(200):
        port = free_port()
        if port <= _HIGHEST_NODE_PORT:
            return port
    raise RuntimeError("no free port for a cluster node")


class ClusterNodeServer(RedisServer):
    """A ``redis-server`` with cluster mode on, keeping its node table in its data dir."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, appendonly=False)
        self.port = _node_port()
        self.extra_args = [
            "--cluster-enabled", "yes", "--cluster-config-file", str(data_dir / "nodes.conf"),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--cluster-require-full-coverage", "no",
        ]  # fmt: skip

    def client(self) -> "redis.Redis":
        return redis.Redis(port=self.port, socket_timeout=5.0)

    def node_id(self) -> str:
        return str(self.client().execute_command("CLUSTER", "MYID").decode())  # type: ignore[no-untyped-call]


class RedisClusterGroup:
    """``masters`` masters, each with ``replicas`` replicas."""

    def __init__(self, folder: Path, *, masters: int = 3, replicas: int = 0) -> None:
        self.replicas = replicas
        self.nodes = [ClusterNodeServer(folder / f"node-{i}") for i in range(masters * (1 + replicas))]
        self.masters = self.nodes[:masters]

    @property
    def seeds(self) -> str:
        """``sluice_redis_cluster``'s value."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.masters)

    @property
    def url(self) -> str:
        return f"redis+cluster://{self.seeds}"

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas),
             "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=START_TIMEOUT_S,
        )  # fmt: skip
        self.wait_settled()

    def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()

    def wait_settled(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every running node says the cluster is ok and agrees on where every slot lives, and
        every running replica is in sync with its master."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                running = self._running()
                states = [node.client().cluster("INFO")["cluster_state"] for node in running]
                maps = {self._ranges(node) for node in running}
                replicating = [node.client().info("replication") for node in running]
                # A replica that never finished its first sync cannot be promoted.
                synced = all(info.get("master_link_status", "up") == "up" for info in replicating)
                if all(state == "ok" for state in states) and len(maps) == 1 and synced:
                    return
            time.sleep(0.1)
        raise TimeoutError("the Redis Cluster did not settle")

    def owner_of(self, key: str) -> ClusterNodeServer:
        """The master serving ``key``'s slot, as the first running node asked says."""
        return self.owner_of_slot(key_slot(key))

    def owner_of_slot(self, slot: int) -> ClusterNodeServer:
        port = next(port for start, end, port in self._ranges(self._running()[0]) if start <= slot <= end)
        return next(node for node in self.nodes if node.port == port)

    def kill_owner(self, key: str) -> ClusterNodeServer:
        """SIGKILL the master serving ``key``; returns it (for :meth:`rejoin`)."""
        owner = self.owner_of(key)
        owner.kill()
        return owner

    def wait_for_failover(
        self, killed: ClusterNodeServer, key: str, timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """Until a replica of ``killed`` serves ``key``'s slot and the running nodes agree on the map."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, StopIteration):
                if self.owner_of(key) is not killed:
                    self.wait_settled(max(0.1, deadline - time.monotonic()))
                    return
            time.sleep(0.1)
        raise TimeoutError(f"no replica took over from port {killed.port} within {timeout_s} s")

    def rejoin(self, killed: ClusterNodeServer, timeout_s: float = START_TIMEOUT_S) -> None:
        """Restart a killed master: it rejoins as a replica of the one promoted in its place."""
        killed.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                info = killed.client().info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    return
            time.sleep(0.1)
        raise TimeoutError(f"the node on port {killed.port} did not rejoin as a replica")

    def _running(self) -> list[ClusterNodeServer]:
        return [node for node in self.nodes if node.process is not None]

    def begin_migration(self, slot: int, target: ClusterNodeServer) -> ClusterNodeServer:
        """Mark ``slot`` as moving from its master (returned) to ``target``; no key moves yet."""
        source = self.owner_of_slot(slot)
        if source is target:
            raise ValueError(f"slot {slot} is already on port {target.port}")
        target.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id())  # type: ignore[no-untyped-call]
        source.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id())  # type: ignore[no-untyped-call]
        return source

    def migrate_slot(
        self, slot: int, target: ClusterNodeServer, *, batch: int = 10, pause_s: float = 0.0
    ) -> int:
        """Move ``slot`` to ``target`` as ``redis-cli --cluster reshard`` does: ``batch`` keys per
        ``MIGRATE``, ``pause_s`` after each batch while keys remain (the slot is then split between
        the two masters: its multi-key commands are answered TRYAGAIN); returns how many keys moved."""
        source = self.begin_migration(slot, target)
        target_id = target.node_id()
        moved = 0
        while True:
            names: Any = source.client().execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)  # type: ignore[no-untyped-call]
            if not names:
                break
            if moved:
                time.sleep(pause_s)
            source.client().execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *names)  # type: ignore[no-untyped-call]
            moved += len(names)
        for node in (target, source, *[n for n in self.masters if n not in (source, target)]):
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)  # type: ignore[no-untyped-call]
        self.wait_settled()
        return moved

    @staticmethod
    def _ranges(node: ClusterNodeServer) -> tuple[tuple[int, int, int], ...]:
        """(first slot, last slot, master's port) of every range, all slots served."""
        reply: Any = node.client().execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
        ranges = tuple(sorted((int(start), int(end), int(master[1])) for start, end, master, *_ in reply))
        served = sum(end - start + 1 for start, end, _ in ranges)
        if served != SLOTS:
            raise redis.RedisError(f"{SLOTS - served} slots not served")
        return ranges


@contextlib.contextmanager
def redis_cluster(folder: Path, *, masters: int = 3, replicas: int = 0) -> Iterator[RedisClusterGroup]:
    group = RedisClusterGroup(folder, masters=masters, replicas=replicas)
    try:
        group.start()
        yield group
    finally:
        group.stop()
