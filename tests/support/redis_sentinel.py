"""A Redis master, its replicas and the Sentinels watching them, all real ``redis-server`` processes on
loopback, for failover tests: the master can be killed, and the killed one restarted to rejoin.

Sentinels decide fast here (``down-after-milliseconds`` 1000), so a failover takes a few seconds.
"""

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from tests.support.redis_server import RedisServer, free_port

MASTER_NAME = "sluice-master"
DOWN_AFTER_MS = 1000
# How long a failover may take before a test gives up on it (Sentinels usually need 2 to 5 s).
FAILOVER_TIMEOUT_S = 60.0
START_TIMEOUT_S = 30.0


class SentinelProcess:
    """``redis-server <conf> --sentinel`` on a free port, monitoring ``MASTER_NAME``."""

    def __init__(self, folder: Path, master_port: int) -> None:
        self.folder = folder
        self.port = free_port()
        self.master_port = master_port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.folder}\n"
            f"logfile {self.folder / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 2\n"
        )
        self.process = subprocess.Popen(
            ["redis-server", str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def client(self) -> "redis.Redis":
        return redis.Redis(port=self.port, socket_timeout=1.0, socket_connect_timeout=1.0)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.process is not None:
            self.process.send_signal(sig)
            self.process.wait(timeout=10)
            self.process = None


class SentinelGroup:
    """One master, ``replicas`` replicas and ``sentinels`` Sentinels; the servers keep no data on disk."""

    def __init__(self, folder: Path, *, replicas: int = 2, sentinels: int = 3) -> None:
        self.servers = [RedisServer(folder / f"redis-{i}", appendonly=False) for i in range(1 + replicas)]
        master_port = self.servers[0].port
        for server in self.servers[1:]:
            server.extra_args = ["--replicaof", "127.0.0.1", str(master_port)]
        self.sentinels = [SentinelProcess(folder / f"sentinel-{i}", master_port) for i in range(sentinels)]

    @property
    def addresses(self) -> str:
        """``sluice_redis_sentinels``'s value."""
        return ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)

    @property
    def url(self) -> str:
        return f"redis+sentinel://{self.addresses}/{MASTER_NAME}/0"

    def start(self) -> None:
        for server in self.servers:
            server.start()
        for sentinel in self.sentinels:
            sentinel.start()
        self._wait_until_known(self.servers[0].port, timeout_s=START_TIMEOUT_S)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            with contextlib.suppress(Exception):
                sentinel.stop()
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()

    def master_port(self) -> int | None:
        """The master's port as the first Sentinel that answers names it."""
        for sentinel in self.sentinels:
            port = self._named_by(sentinel)
            if port is not None:
                return port
        return None

    def master(self) -> RedisServer:
        port = self.master_port()
        return next(server for server in self.servers if server.port == port)

    def master_client(self) -> "redis.Redis":
        return redis.Redis(port=self.master().port, socket_timeout=5.0)

    def kill_master(self) -> RedisServer:
        """SIGKILL the master; returns it (for :meth:`rejoin`)."""
        master = self.master()
        master.kill()
        return master

    def wait_for_failover(self, old_port: int, timeout_s: float = FAILOVER_TIMEOUT_S) -> RedisServer:
        """The new master, once every Sentinel names it, it answers as master and every other
        server that runs replicates it (a demoted master accepts writes until it is reconfigured:
        the window a failover may lose acknowledged writes in)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ports = {self._named_by(sentinel) for sentinel in self.sentinels}
            port = ports.pop() if len(ports) == 1 else None
            if port not in (None, old_port) and self._settled_on(port):
                return next(server for server in self.servers if server.port == port)
            time.sleep(0.1)
        raise TimeoutError(f"no failover away from port {old_port} within {timeout_s} s")

    def _settled_on(self, master_port: int) -> bool:
        for server in self.servers:
            if server.process is None:
                continue
            role, following = self._role(server.port)
            if (role, following) != (
                ("master", None) if server.port == master_port else ("slave", master_port)
            ):
                return False
        return True

    def rejoin(self, server: RedisServer, timeout_s: float = FAILOVER_TIMEOUT_S) -> None:
        """Restart a killed server; Sentinels turn it into a replica of the new master."""
        server.extra_args = []
        server.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError):
                info = redis.Redis(port=server.port, socket_timeout=1.0).info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    return
            time.sleep(0.1)
        raise TimeoutError(f"the server on port {server.port} did not rejoin as a replica")

    def _named_by(self, sentinel: SentinelProcess) -> int | None:
        with contextlib.suppress(redis.RedisError), contextlib.closing(sentinel.client()) as client:
            address: Any = client.sentinel_get_master_addr_by_name(MASTER_NAME)
            return int(address[1]) if address else None
        return None

    @staticmethod
    def _role(port: int) -> tuple[str, int | None]:
        """A server's role and the port of the master it replicates."""
        with contextlib.suppress(redis.RedisError):
            info = redis.Redis(port=port, socket_timeout=1.0).info("replication")
            return str(info.get("role")), info.get("master_port")
        return "", None

    def _wait_until_known(self, master_port: int, timeout_s: float) -> None:
        """Until every Sentinel knows the master, every replica is in sync and the Sentinels know each
        other (a failover needs the quorum to agree)."""
        others = len(self.sentinels) - 1
        replicas = len(self.servers) - 1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self._ready(sentinel, others, replicas) for sentinel in self.sentinels):
                return
            time.sleep(0.1)
        raise TimeoutError(f"Sentinels did not settle on the master on port {master_port}")

    @staticmethod
    def _ready(sentinel: SentinelProcess, others: int, replicas: int) -> bool:
        with contextlib.suppress(redis.RedisError), contextlib.closing(sentinel.client()) as client:
            known: Any = client.sentinel_sentinels(MASTER_NAME)
            listed: Any = client.sentinel_slaves(MASTER_NAME)
            linked = [r for r in listed if not r["is_sdown"] and r.get("master-link-status") == "ok"]
            return len(known) >= others and len(linked) >= replicas
        return False


@contextlib.contextmanager
def sentinel_group(folder: Path) -> Iterator[SentinelGroup]:
    group = SentinelGroup(folder)
    group.start()
    try:
        yield group
    finally:
        group.stop()
