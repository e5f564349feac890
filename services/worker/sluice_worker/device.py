"""Which device a worker runs on. The configured gpu id decides; what the machine offers only
confirms it. The choice is a pure function so the CUDA paths are tested on CPU-only machines.

The handler sees the choice as ``context.system_properties["gpu_id"]``, and TorchServe's
``BaseHandler`` turns a non-None gpu id into ``cuda:<id>`` (or ``mps``) by itself.
"""

from dataclasses import dataclass
from typing import Protocol

import torch


class DeviceError(ValueError):
    """The configured device does not exist on this machine."""


@dataclass(frozen=True)
class DeviceChoice:
    # "cpu", "cuda:<n>" or "mps": reported in the worker record.
    device: str
    # The gpu id the handler is given: None on the CPU, as TorchServe does.
    gpu_id: int | None
    # Why a requested GPU is not used (logged as a warning); "" when the request was honoured.
    fallback_reason: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.gpu_id is not None


def choose_device(
    requested_gpu_id: int | None, cuda_device_count: int, mps_available: bool = False
) -> DeviceChoice:
    if requested_gpu_id is None:
        return DeviceChoice(device="cpu", gpu_id=None)
    if requested_gpu_id < 0:
        raise DeviceError(f"gpu id must be >= 0, got {requested_gpu_id}")
    if cuda_device_count > 0:
        if requested_gpu_id >= cuda_device_count:
            raise DeviceError(
                f"gpu {requested_gpu_id} requested but this machine has {cuda_device_count} CUDA device(s)"
            )
        return DeviceChoice(device=f"cuda:{requested_gpu_id}", gpu_id=requested_gpu_id)
    if mps_available:
        return DeviceChoice(device="mps", gpu_id=requested_gpu_id)
    # Handing a gpu id to a handler on a machine without CUDA breaks handlers that trust it.
    return DeviceChoice(
        device="cpu",
        gpu_id=None,
        fallback_reason=f"gpu {requested_gpu_id} requested but CUDA is not available",
    )


class CudaApi(Protocol):
    def set_device(self, device: int) -> None: ...


def probe() -> tuple[int, bool]:
    """(CUDA device count, whether MPS is available) on this machine."""
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return cuda_count, bool(torch.backends.mps.is_available())


def activate(choice: DeviceChoice, cuda: CudaApi = torch.cuda) -> None:
    """Make the chosen CUDA device current. CUDA's current device is per thread, so this runs on the
    thread that runs the handler (:class:`sluice_worker.torch_thread.TorchThread`)."""
    if choice.device.startswith("cuda") and choice.gpu_id is not None:
        cuda.set_device(choice.gpu_id)
