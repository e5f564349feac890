"""Request payloads, built once per cell and sent unchanged: every server and every client gets the
same bytes. A model input is a float32 tensor, little-endian, row-major, sent as raw bytes:

- TorchServe gRPC ``Predictions`` / ``StreamPredictions``: ``PredictionsRequest{input: {"data": bytes}}``
- KServe v2 ``ModelInfer``: one FP32 input ``INPUT__0`` of shape ``[1, *shape]`` in ``raw_input_contents``
- REST ``POST /predictions/<model>``: the bytes as ``application/octet-stream``
- h2load: the gRPC request pre-framed (1-byte flag, 4-byte big-endian length, message)
"""

import struct
from dataclasses import dataclass

import numpy as np
from sluice.v1 import kserve_pb2, torchserve_inference_pb2

TS_SERVICE = "/org.pytorch.serve.grpc.inference.InferenceAPIsService"
PREDICTIONS_METHOD = f"{TS_SERVICE}/Predictions"
STREAM_PREDICTIONS_METHOD = f"{TS_SERVICE}/StreamPredictions"
PING_METHOD = f"{TS_SERVICE}/Ping"
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
KSERVE_INPUT = "INPUT__0"
KSERVE_OUTPUT = "OUTPUT__0"
INPUT_KEY = "data"
GRPC_CONTENT_TYPE = "application/grpc"
REST_CONTENT_TYPE = "application/octet-stream"
_FRAME_HEADER = struct.Struct(">BI")
# A streaming handler's message: the wall clock (time.time_ns) at the handler's send, then its index.
STAMP = struct.Struct("<qi")


def tensor_bytes(shape: tuple[int, ...], seed: int = 0) -> bytes:
    """A deterministic float32 tensor of ``shape`` (values in [-1, 1)), as raw little-endian bytes."""
    generator = np.random.default_rng(seed)
    array = generator.uniform(-1.0, 1.0, size=shape).astype("<f4")
    return array.tobytes()


def predictions_request(model: str, data: bytes, extra: dict[str, bytes] | None = None) -> bytes:
    """A serialized TorchServe ``PredictionsRequest`` carrying ``data`` under the ``data`` key."""
    inputs = {INPUT_KEY: data, **(extra or {})}
    return torchserve_inference_pb2.PredictionsRequest(model_name=model, input=inputs).SerializeToString()


def model_infer_request(model: str, data: bytes, shape: tuple[int, ...]) -> bytes:
    """A serialized KServe v2 ``ModelInferRequest`` with one raw FP32 input of shape ``[1, *shape]``."""
    request = kserve_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name=KSERVE_INPUT, datatype="FP32", shape=[1, *shape])
    request.raw_input_contents.append(data)
    return request.SerializeToString()


def model_infer_shm_request(model: str, region: str, byte_size: int, shape: tuple[int, ...]) -> bytes:
    """A serialized KServe v2 ``ModelInferRequest`` whose one FP32 input of shape ``[1, *shape]`` is in
    the registered system shared-memory region ``region`` (no raw entry)."""
    request = kserve_pb2.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name=KSERVE_INPUT, datatype="FP32", shape=[1, *shape])
    tensor.parameters["shared_memory_region"].string_param = region
    tensor.parameters["shared_memory_byte_size"].int64_param = byte_size
    return request.SerializeToString()


def grpc_frame(message: bytes) -> bytes:
    """``message`` as one uncompressed gRPC length-prefixed frame (what h2load sends as the body)."""
    return _FRAME_HEADER.pack(0, len(message)) + message


def parse_grpc_frame(frame: bytes) -> bytes:
    """The message inside one gRPC frame; ValueError if the frame is compressed or truncated."""
    if len(frame) < _FRAME_HEADER.size:
        raise ValueError("a gRPC frame has a 5-byte header")
    compressed, length = _FRAME_HEADER.unpack_from(frame)
    if compressed:
        raise ValueError("compressed gRPC frames are not supported")
    if len(frame) != _FRAME_HEADER.size + length:
        raise ValueError(f"gRPC frame says {length} bytes, carries {len(frame) - _FRAME_HEADER.size}")
    return frame[_FRAME_HEADER.size :]


def stream_stamp(sent_ns: int, index: int) -> bytes:
    return STAMP.pack(sent_ns, index)


def read_stream_stamp(prediction: bytes) -> tuple[int, int]:
    """(sent wall-clock ns, message index) from a streaming handler's message."""
    sent_ns, index = STAMP.unpack_from(prediction)
    return sent_ns, index


def prediction_of(response: bytes) -> bytes:
    """The ``prediction`` bytes of a serialized ``PredictionResponse``."""
    return torchserve_inference_pb2.PredictionResponse.FromString(response).prediction


@dataclass(frozen=True)
class Payloads:
    """Every wire form of one model input."""

    model: str
    shape: tuple[int, ...]
    data: bytes
    predictions: bytes
    model_infer: bytes
    rest: bytes

    @classmethod
    def build(cls, model: str, shape: tuple[int, ...], seed: int = 0) -> "Payloads":
        data = tensor_bytes(shape, seed)
        return cls(
            model=model,
            shape=shape,
            data=data,
            predictions=predictions_request(model, data),
            model_infer=model_infer_request(model, data, shape),
            rest=data,
        )
