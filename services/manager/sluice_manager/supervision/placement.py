"""Where new workers go: a pure function of what the launcher offers (:class:`Capacity`) and what the
workers already running there hold (their saved :class:`Placement`).

- Torch threads: the host's cores shared by the workers planned on it (at least 1 each), so a few
  workers do not oversubscribe the cores and one worker alone gets them all.
- GPUs: a model uses one when the host has any, unless its ``deviceType`` is ``cpu`` (TorchServe's
  default: a worker uses the GPU when one is available). Each new worker takes the GPU that holds the
  fewest workers, the lowest id first: round robin over the host's GPUs, as TorchServe hands them out,
  and still balanced after a restarted manager adopted workers that hold some of them.
"""

from collections import Counter
from collections.abc import Sequence

from sluice_manager.supervision.launchers.base import Capacity, Placement

CPU_ONLY = "cpu"


def wants_gpu(device_type: str, capacity: Capacity) -> bool:
    """Whether a version with ``device_type`` ("", "cpu" or "gpu") runs on a GPU of this host."""
    return device_type != CPU_ONLY and bool(capacity.gpu_ids)


def torch_threads(capacity: Capacity, planned_workers: int) -> int:
    return max(1, capacity.cpus // max(1, planned_workers))


def place(
    capacity: Capacity,
    held: Sequence[Placement],
    count: int,
    *,
    device_type: str,
    planned_workers: int,
) -> list[Placement]:
    """Placements for ``count`` new workers of one version on ``capacity``'s host; ``held`` are the
    placements of the workers already running there (of every version), ``planned_workers`` the
    number of workers the host is meant to run in all."""
    threads = torch_threads(capacity, planned_workers)
    if not wants_gpu(device_type, capacity):
        return [Placement(host=capacity.host, torch_threads=threads) for _ in range(count)]
    load = Counter({gpu: 0 for gpu in capacity.gpu_ids})
    for placement in held:
        if placement.host == capacity.host and placement.gpu_id is not None and placement.gpu_id in load:
            load[placement.gpu_id] += 1
    placements: list[Placement] = []
    for _ in range(count):
        gpu = min(capacity.gpu_ids, key=lambda gpu_id: (load[gpu_id], gpu_id))
        load[gpu] += 1
        placements.append(Placement(host=capacity.host, torch_threads=threads, gpu_id=gpu))
    return placements
