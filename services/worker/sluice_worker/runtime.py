"""Loading and calling the handler through TorchServe's own ``ts`` package, the way its Python
worker (``ts/model_service_worker.py``) does, minus the socket. Both functions run on the torch
thread (:class:`sluice_worker.torch_thread.TorchThread`)."""

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import ts
from sluice.kserve.declaration import ModelTensors
from sluice.log import get_logger
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
from ts.model_loader import TsModelLoader
from ts.protocol.otf_message_handler import create_predict_response
from ts.service import PREDICTION_METRIC, Service
from ts.utils.util import PredictionException

from sluice_worker import device
from sluice_worker.protocols import NO_TENSORS, TsRequest
from sluice_worker.protocols.kserve import KServe
from sluice_worker.sequence_state import StateHooks, find_hooks
from sluice_worker.sink import ReplySink

log = get_logger(__name__)

# The metrics definitions TorchServe's frontend hands its workers when config.properties names none.
DEFAULT_METRICS_CONFIG = Path(ts.__file__).parent / "configs" / "metrics.yaml"


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
    # config.properties metrics_config: the metrics a handler may get from context.metrics.
    metrics_config: Path | None = None


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
    metrics = MetricsCacheYamlImpl(config_file_path=str(spec.metrics_config or DEFAULT_METRICS_CONFIG))
    metrics.initialize_cache()
    metrics.model_name = spec.model_name
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


async def predict_async(service: HandlerService, requests: list[TsRequest], sink: Any) -> bytes:
    """One call of an async handler (``async def handle``), as TorchServe 0.12's async worker makes
    it (``ts.async_service.predict``): a copy of the context per call, the same answers and errors;
    but ``context.cl_socket`` is this call's own ``sink`` (TorchServe's calls share one socket), and
    nothing is printed per call. Runs on the handler loop (:mod:`sluice_worker.handler_loop`)."""
    ts_service: Any = service
    headers, input_batch, req_id_map = Service.retrieve_data_for_inference(requests)
    context = copy.deepcopy(ts_service.context)
    context.request_ids = req_id_map
    context.request_processor = headers
    context.cl_socket = sink
    context.metrics.request_ids = req_id_map
    started = time.time()
    try:
        result = await ts_service._entry_point(input_batch, context)
    except MemoryError:
        log.error("System out of memory", exc_info=True)
        return _frame(None, req_id_map, "Out of resources", 507)
    except PredictionException as exc:
        log.error("Prediction error", exc_info=True)
        return _frame(None, req_id_map, exc.message, exc.error_code)
    except Exception as exc:
        if "CUDA" in str(exc):
            log.error("CUDA out of memory", exc_info=True)
            return _frame(None, req_id_map, "Out of resources", 507)
        log.warning("Invoking custom service failed.", exc_info=True)
        return _frame(None, req_id_map, "Prediction failed", 503)
    if not isinstance(result, list):
        log.warning("Invalid return type", return_type=type(result).__name__)
        return _frame(None, req_id_map, "Invalid model predict output", 503)
    if len(result) != len(input_batch):
        log.warning("number of batch response mismatched", expected=len(input_batch), got=len(result))
        return _frame(None, req_id_map, "number of batch response mismatched", 503)
    context.metrics.add_time(PREDICTION_METRIC, round((time.time() - started) * 1000, 2))
    return _frame(result, req_id_map, "Prediction success", 200, context)


def _frame(result: Any, req_id_map: dict[int, str], message: str, code: int, context: Any = None) -> bytes:
    return bytes(create_predict_response(result, req_id_map, message, code, context=context))
