"""TorchServe's system metrics, for every host of the cluster that runs a gateway or a worker: the
gateway's own host read at scrape time, the workers' hosts as of their last heartbeat
(:class:`~sluice.host_readings.HostReadings` in their records). Names, units and labels
(``Level="Host"``, ``Hostname``) are TorchServe's; a host seen twice is reported once (the gateway's
own reading first, then the first worker's)."""

from collections.abc import Sequence

from sluice.host_readings import HostReadings

from sluice_gateway.metrics.cluster import VersionStats
from sluice_gateway.metrics.exposition import MetricFamily, Sample

# (name, unit, HostReadings field), in TorchServe's order of its metrics file.
_GAUGES = (
    ("CPUUtilization", "Percent", "cpu_percent"),
    ("MemoryUsed", "Megabytes", "memory_used_mib"),
    ("MemoryAvailable", "Megabytes", "memory_available_mib"),
    ("MemoryUtilization", "Percent", "memory_percent"),
    ("DiskUsage", "Gigabytes", "disk_used_gib"),
    ("DiskUtilization", "Percent", "disk_percent"),
    ("DiskAvailable", "Gigabytes", "disk_available_gib"),
)


def hosts(own: tuple[str, HostReadings], stats: Sequence[VersionStats]) -> dict[str, HostReadings]:
    """Each host's readings: ``own`` (this gateway's host and its readings), then the live workers'
    (a record from a worker that sends none has no memory reading and is skipped)."""
    found = dict([own])
    for version in stats:
        for worker in version.workers:
            if worker.host_readings.memory_used_mib > 0:
                found.setdefault(worker.host, worker.host_readings)
    return found


def families(readings: dict[str, HostReadings]) -> list[MetricFamily]:
    return [
        MetricFamily(
            name,
            "gauge",
            f"Torchserve prometheus gauge metric with unit: {unit}",
            [
                Sample(name, [("Level", "Host"), ("Hostname", host)], getattr(reading, attribute))
                for host, reading in sorted(readings.items())
            ],
        )
        for name, unit, attribute in _GAUGES
    ]
