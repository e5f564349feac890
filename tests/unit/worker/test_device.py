"""Device choice: the configured gpu id decides; CUDA paths are exercised without a GPU."""

import pytest
from sluice_worker.device import DeviceChoice, DeviceError, activate, choose_device


def test_no_gpu_id_runs_on_cpu_even_with_gpus() -> None:
    assert choose_device(None, cuda_device_count=4) == DeviceChoice(device="cpu", gpu_id=None)


@pytest.mark.parametrize(("gpu_id", "count"), [(0, 1), (1, 2), (3, 4)])
def test_gpu_id_selects_that_cuda_device(gpu_id: int, count: int) -> None:
    choice = choose_device(gpu_id, cuda_device_count=count)
    assert choice == DeviceChoice(device=f"cuda:{gpu_id}", gpu_id=gpu_id)
    assert choice.is_gpu


def test_gpu_id_beyond_the_devices_is_an_error() -> None:
    with pytest.raises(DeviceError, match="2 CUDA device"):
        choose_device(2, cuda_device_count=2)


def test_negative_gpu_id_is_an_error() -> None:
    with pytest.raises(DeviceError):
        choose_device(-1, cuda_device_count=2)


def test_gpu_id_without_cuda_falls_back_to_cpu_and_hides_the_id() -> None:
    choice = choose_device(0, cuda_device_count=0)
    assert (choice.device, choice.gpu_id, choice.is_gpu) == ("cpu", None, False)
    assert "CUDA is not available" in choice.fallback_reason


def test_gpu_id_on_apple_silicon_uses_mps() -> None:
    assert choose_device(0, cuda_device_count=0, mps_available=True) == DeviceChoice(device="mps", gpu_id=0)


class _RecordingCuda:
    def __init__(self) -> None:
        self.devices: list[int] = []

    def set_device(self, device: int) -> None:
        self.devices.append(device)


def test_activate_makes_the_cuda_device_current() -> None:
    cuda = _RecordingCuda()
    activate(choose_device(1, cuda_device_count=2), cuda)
    assert cuda.devices == [1]


@pytest.mark.parametrize("choice", [DeviceChoice("cpu", None), DeviceChoice("mps", 0)])
def test_activate_leaves_cuda_alone_off_cuda(choice: DeviceChoice) -> None:
    cuda = _RecordingCuda()
    activate(choice, cuda)
    assert cuda.devices == []
