"""What the servers cost while a cell runs: RSS (sampled) and CPU time of every process by role, the
CPU the rest of the machine used meanwhile (noise), and Redis memory.

Roles: ``client`` (this process), Sluice's ``gateway`` / ``manager`` / ``redis`` / ``worker:<model>``,
TorchServe's ``frontend`` (the JVM) / ``worker:<port>``.
"""

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

MIB = 1024 * 1024
Roles = Mapping[str, list[psutil.Process]]


def rss_mib(processes: Roles) -> dict[str, float]:
    """RSS per role now, in MiB (a role's processes added up)."""
    out: dict[str, float] = {}
    for role, members in processes.items():
        total = 0
        for process in members:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
        out[role] = total / MIB
    return out


def cpu_seconds(processes: Roles) -> dict[str, float]:
    out: dict[str, float] = {}
    for role, members in processes.items():
        total = 0.0
        for process in members:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        out[role] = total
    return out


def busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle, since boot."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    return sum(times) - idle


@dataclass
class Usage:
    """What one measured interval cost."""

    wall_s: float
    cpu_s: dict[str, float]
    rss_max_mib: dict[str, float]
    # CPU seconds the machine used outside the roles (other engineers, the OS): the noise.
    foreign_cpu_s: float

    def cpu_ms_per_request(self, requests: int) -> dict[str, float]:
        if requests <= 0:
            return {}
        return {role: seconds * 1000.0 / requests for role, seconds in self.cpu_s.items()}

    def as_record(self, requests: int) -> dict[str, Any]:
        return {
            "cpu_s": self.cpu_s,
            "cpu_ms_per_req": self.cpu_ms_per_request(requests),
            "rss_max_mib": self.rss_max_mib,
            "foreign_cores": self.foreign_cpu_s / self.wall_s if self.wall_s > 0 else 0.0,
        }


@dataclass
class ResourceMonitor:
    """Samples RSS every ``interval_s`` on a thread between ``start()`` and ``stop()``."""

    processes: Callable[[], Roles]
    interval_s: float = 0.5
    _roles: dict[str, list[psutil.Process]] = field(default_factory=dict)
    _rss_max: dict[str, float] = field(default_factory=dict)
    _cpu_start: dict[str, float] = field(default_factory=dict)
    _busy_start: float = 0.0
    _wall_start: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "ResourceMonitor":
        self._roles = {"client": [psutil.Process(os.getpid())], **self.processes()}
        self._cpu_start = cpu_seconds(self._roles)
        self._busy_start = busy_seconds()
        self._wall_start = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        for role, mib in rss_mib(self._roles).items():
            self._rss_max[role] = max(mib, self._rss_max.get(role, 0.0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> Usage:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._sample()
        wall = time.perf_counter() - self._wall_start
        end = cpu_seconds(self._roles)
        cpu = {role: max(0.0, end.get(role, 0.0) - self._cpu_start.get(role, 0.0)) for role in end}
        foreign = max(0.0, busy_seconds() - self._busy_start - sum(cpu.values()))
        return Usage(wall_s=wall, cpu_s=cpu, rss_max_mib=dict(self._rss_max), foreign_cpu_s=foreign)


def redis_memory(url: str) -> dict[str, Any]:
    """Redis INFO memory figures, key count and the total length of Sluice's streams."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5.0)
    try:
        info = client.info("memory")
        streams = 0
        entries = 0
        for key in client.scan_iter(match="sluice:*", count=1000, _type="STREAM"):
            streams += 1
            entries += int(client.xlen(key))
        return {
            "used_memory": int(info["used_memory"]),
            "used_memory_rss": int(info["used_memory_rss"]),
            "dbsize": int(client.dbsize()),
            "streams": streams,
            "stream_entries": entries,
        }
    finally:
        client.close()


def reset_redis_commands(url: str) -> None:
    """Zero Redis's per-command counters (``CONFIG RESETSTAT``) before a measured interval."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5.0)
    try:
        client.config_resetstat()
    finally:
        client.close()


def redis_commands(url: str) -> dict[str, int]:
    """Calls per command since the last reset (``INFO commandstats``), commands that scripts run
    included: what Redis executed, not only what clients sent."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5.0)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(fields["calls"]) for name, fields in stats.items()}


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()
