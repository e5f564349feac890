"""What a worker uses, refreshed into its record with every heartbeat so that DescribeModel and the
metrics show it for workers on any host: the process's resident memory and, on a GPU, TorchServe's
``GPUUtilization`` (percent, through NVML when torch can reach it) and ``GPUMemoryUsed`` (MiB this
process holds on the device).

The GPU readings go through a small :class:`GpuReadings` seam, so the CUDA path is unit-tested on
machines without a GPU.
"""

import dataclasses
from collections.abc import Callable
from typing import Protocol

import psutil
import torch
from sluice.records import WorkerRecord

from sluice_worker.device import DeviceChoice

MIB = 1024 * 1024


class GpuReadings(Protocol):
    def utilization(self, device: int) -> int: ...

    def memory_reserved(self, device: int) -> int: ...


class TorchGpu:
    """GPU readings through torch: utilization needs NVML (``nvidia-ml-py``); without it, 0."""

    def utilization(self, device: int) -> int:
        try:
            return int(torch.cuda.utilization(device))
        except Exception:  # NVML missing or not initialised: the reading is unavailable
            return 0

    def memory_reserved(self, device: int) -> int:
        return int(torch.cuda.memory_reserved(device))


def usage_refresher(
    choice: DeviceChoice, gpu: GpuReadings | None = None, rss: Callable[[], int] | None = None
) -> Callable[[WorkerRecord], WorkerRecord]:
    """A function that returns ``record`` with this worker's current use filled in."""
    process = psutil.Process()
    read_rss = rss or (lambda: int(process.memory_info().rss))
    readings = gpu or TorchGpu()
    on_cuda = choice.device.startswith("cuda") and choice.gpu_id is not None

    def refresh(record: WorkerRecord) -> WorkerRecord:
        if not on_cuda or choice.gpu_id is None:
            return dataclasses.replace(record, memory_bytes=read_rss())
        return dataclasses.replace(
            record,
            memory_bytes=read_rss(),
            gpu_id=choice.gpu_id,
            gpu_utilization_percent=float(readings.utilization(choice.gpu_id)),
            gpu_memory_used_mib=readings.memory_reserved(choice.gpu_id) / MIB,
        )

    return refresh
