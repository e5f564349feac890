"""Loading and calling the handler through TorchServe's own ``ts`` package, the way its Python
worker (``ts/model_service_worker.py``) does, minus the socket. Both functions run on the torch
thread (:class:`sluice_worker.torch_thread.TorchThread`)."""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import ts
from sluice.kserve.declaration import ModelTensors
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.model_loader import TsModelLoader

from sluice_worker import device
from sluice_worker.protocols import NO_TENSORS, TsRequest
from sluice_worker.protocols.kserve import KServe
from sluice_worker.sequence_state import StateHooks, find_hooks
from sluice_worker.sink import ReplySink

# The metrics definitions TorchServe's frontend hands its workers by default.
METRICS_CONFIG = Path(ts.__file__).parent / "configs" / "metrics.yaml"


@dataclass(frozen=True)
class LoadSpec:
    model_name: str
    model_dir: str
    handler: str
    batch_size: int
    envelope: str
    choice: device.DeviceChoice
    torch_threads: int | None = None
    # KServe v2 declaration; tensor_handler models get their results packed (protocols.kserve).
    tensors: ModelTensors = NO_TENSORS


class HandlerService(Protocol):
    """What the worker calls on TorchServe's ``ts.service.Service`` (on the torch thread)."""

    def set_cl_socket(self, cl_socket: Any) -> None:
        """Where ``send_intermediate_predict_response`` writes (the batch's :class:`ReplySink`)."""
        ...

    def predict(self, batch: list[TsRequest]) -> bytes | bytearray:
        """Run the handler on ``batch``; TorchServe's predict-response frame (sluice_worker.frames)."""
        ...


def load_service(spec: LoadSpec) -> HandlerService:
    """A ``ts.service.Service`` with the handler loaded and initialized (``initialize(context)``)."""
    if spec.torch_threads is not None:
        torch.set_num_threads(spec.torch_threads)
    device.activate(spec.choice)
    metrics = MetricsCacheYamlImpl(config_file_path=str(METRICS_CONFIG))
    metrics.initialize_cache()
    metrics.model_name = spec.model_name
    # TorchServe writes a metric line per request to its metrics log; here they would flood the worker log.
    logging.getLogger("ts.metrics").setLevel(logging.WARNING)
    service = TsModelLoader().load(
        spec.model_name,
        spec.model_dir,
        spec.handler,
        spec.choice.gpu_id,
        spec.batch_size,
        spec.envelope or None,
        limit_max_image_pixels=True,
        metrics_cache=metrics,
    )
    if spec.tensors.tensor_handler:
        service._entry_point = KServe(spec.tensors).tensor_entry_point(service._entry_point)
    loaded: HandlerService = service
    return loaded


def sequence_hooks(service: HandlerService) -> StateHooks | None:
    """The loaded handler's sequence-state functions (sluice_worker.sequence_state), if it has them."""
    entry_point = getattr(service, "_entry_point", None)
    entry_point = getattr(entry_point, "__wrapped__", entry_point)
    return None if entry_point is None else find_hooks(entry_point)


def predict(service: HandlerService, requests: list[TsRequest], sink: ReplySink) -> bytes:
    """One handler call for a batch; returns TorchServe's predict-response frame."""
    service.set_cl_socket(sink)
    frame = service.predict(requests)
    return bytes(frame)
