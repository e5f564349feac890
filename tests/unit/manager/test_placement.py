"""Where new workers go: torch threads from the host's cores, GPUs round robin by load."""

from sluice_manager.supervision.launchers.base import Capacity, Placement
from sluice_manager.supervision.placement import place, torch_threads, wants_gpu

CPU_HOST = Capacity(host="h", cpus=8)
GPU_HOST = Capacity(host="h", cpus=8, gpu_ids=(0, 1, 2))


def gpus(placements: list[Placement]) -> list[int | None]:
    return [placement.gpu_id for placement in placements]


def test_threads_share_the_cores_among_the_planned_workers() -> None:
    assert torch_threads(CPU_HOST, 1) == 8
    assert torch_threads(CPU_HOST, 3) == 2
    assert torch_threads(CPU_HOST, 20) == 1
    assert torch_threads(CPU_HOST, 0) == 8
    [one] = place(CPU_HOST, [], 1, device_type="", planned_workers=4)
    assert one == Placement(host="h", torch_threads=2, gpu_id=None)


def test_a_gpu_is_used_when_the_host_has_one_unless_the_model_says_cpu() -> None:
    assert wants_gpu("", GPU_HOST)
    assert wants_gpu("gpu", GPU_HOST)
    assert not wants_gpu("cpu", GPU_HOST)
    assert not wants_gpu("gpu", CPU_HOST), "TorchServe: gpu only counts if GPUs exist"
    assert gpus(place(GPU_HOST, [], 2, device_type="cpu", planned_workers=2)) == [None, None]
    assert gpus(place(CPU_HOST, [], 2, device_type="gpu", planned_workers=2)) == [None, None]


def test_gpus_are_handed_out_round_robin() -> None:
    assert gpus(place(GPU_HOST, [], 5, device_type="", planned_workers=5)) == [0, 1, 2, 0, 1]


def test_held_gpus_count_so_a_restarted_manager_balances() -> None:
    held = [Placement(host="h", gpu_id=0), Placement(host="h", gpu_id=0), Placement(host="h", gpu_id=2)]
    assert gpus(place(GPU_HOST, held, 3, device_type="", planned_workers=6)) == [1, 1, 2]


def test_only_this_hosts_placements_and_gpus_count() -> None:
    elsewhere = [Placement(host="other", gpu_id=0), Placement(host="h", gpu_id=7)]
    assert gpus(place(GPU_HOST, elsewhere, 1, device_type="", planned_workers=1)) == [0]
