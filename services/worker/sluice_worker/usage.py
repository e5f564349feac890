"""What a worker uses, refreshed into its record with every heartbeat so that DescribeModel, the
metrics and the autoscaler see it for workers on any host: the process's resident memory, the share
of the time since the last beat its handler was running and, on a GPU, TorchServe's
``GPUUtilization`` and ``GPUMemoryUtilization`` (percent, through NVML when torch can reach it) and
``GPUMemoryUsed`` (MiB this process holds on the device); and its host's CPU, memory and disk
(:mod:`sluice.host_readings`).

The GPU readings go through a small :class:`GpuReadings` seam, so the CUDA path is unit-tested on
machines without a GPU.
"""

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol

import psutil
import torch
from sluice.host_readings import HostReadings, read_host
from sluice.registry.records import WorkerRecord

from sluice_worker.device import DeviceChoice

MIB = 1024 * 1024


class GpuReadings(Protocol):
    def utilization(self, device: int) -> int: ...

    def memory_utilization(self, device: int) -> int: ...

    def memory_reserved(self, device: int) -> int: ...


class TorchGpu:
    """GPU readings through torch: utilization needs NVML (``nvidia-ml-py``); without it, 0."""

    def utilization(self, device: int) -> int:
        try:
            return int(torch.cuda.utilization(device))
        except Exception:  # NVML missing or not initialised: the reading is unavailable
            return 0

    def memory_utilization(self, device: int) -> int:
        """Percent of the last sample period the device's memory was read or written (NVML), what
        TorchServe reports as GPUMemoryUtilization; 0 without NVML."""
        try:
            return int(torch.cuda.memory_usage(device))
        except Exception:  # NVML missing or not initialised: the reading is unavailable
            return 0

    def memory_reserved(self, device: int) -> int:
        return int(torch.cuda.memory_reserved(device))


class BusyShare:
    """The share of wall time between two readings that ``busy_s`` (seconds of work so far) grew by."""

    def __init__(self, busy_s: Callable[[], float], clock: Callable[[], float] = time.monotonic) -> None:
        self._busy_s = busy_s
        self._clock = clock
        self._last = (clock(), busy_s())

    def read(self) -> float:
        now, busy = self._clock(), self._busy_s()
        last_at, last_busy = self._last
        self._last = (now, busy)
        if now <= last_at:
            return 0.0
        return round(min(1.0, max(0.0, (busy - last_busy) / (now - last_at))), 3)


def usage_refresher(
    choice: DeviceChoice,
    busy_s: Callable[[], float],
    gpu: GpuReadings | None = None,
    rss: Callable[[], int] | None = None,
    running: Callable[[], int] = lambda: 0,
    slots: int = 0,
    host: Callable[[], HostReadings] = read_host,
) -> Callable[[WorkerRecord], WorkerRecord]:
    """A function that returns ``record`` with this worker's current use filled in; ``busy_s`` gives
    the seconds its handler has run so far; a generative model's worker reports the requests it
    holds ``running`` and its ``slots``."""
    process = psutil.Process()
    read_rss = rss or (lambda: int(process.memory_info().rss))
    readings = gpu or TorchGpu()
    on_cuda = choice.device.startswith("cuda") and choice.gpu_id is not None
    busy = BusyShare(busy_s)

    def refresh(record: WorkerRecord) -> WorkerRecord:
        used = dataclasses.replace(
            record,
            memory_bytes=read_rss(),
            busy_share=busy.read(),
            running=running(),
            slots=slots,
            host_readings=host(),
        )
        if not on_cuda or choice.gpu_id is None:
            return used
        return dataclasses.replace(
            used,
            gpu_id=choice.gpu_id,
            gpu_utilization_percent=float(readings.utilization(choice.gpu_id)),
            gpu_memory_utilization_percent=float(readings.memory_utilization(choice.gpu_id)),
            gpu_memory_used_mib=readings.memory_reserved(choice.gpu_id) / MIB,
        )

    return refresh
