"""A host's CPU, memory and disk as TorchServe's system metrics report them (its
``ts/metrics/system_metrics.py``): ``CPUUtilization`` and ``MemoryUtilization`` / ``DiskUtilization``
in percent, ``MemoryUsed`` / ``MemoryAvailable`` in MiB, ``DiskUsage`` / ``DiskAvailable`` of ``/`` in
GiB. Workers send theirs with every heartbeat (in their record), gateways read their own at scrape
time, so every host of the cluster that runs either is reported."""

from dataclasses import dataclass

import psutil

from sluice.typed import Checked

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True, kw_only=True)
class HostReadings(Checked):
    cpu_percent: float = 0.0
    memory_used_mib: float = 0.0
    memory_available_mib: float = 0.0
    memory_percent: float = 0.0
    disk_used_gib: float = 0.0
    disk_available_gib: float = 0.0
    disk_percent: float = 0.0


def read_host() -> HostReadings:
    """This host now; the CPU share is since the previous call in this process (0.0 at the first)."""
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage("/")
    return HostReadings(
        cpu_percent=psutil.cpu_percent(),
        memory_used_mib=memory.used / MIB,
        memory_available_mib=memory.available / MIB,
        memory_percent=memory.percent,
        disk_used_gib=disk.used / GIB,
        disk_available_gib=disk.free / GIB,
        disk_percent=disk.percent,
    )
